// The markdown of what models write, rendered safely: paragraphs, headings, lists, block
// quotes, rules, fenced code, code spans, bold, italic and links (http and https only). It
// builds nodes and puts every piece of text in a text node, so HTML in the text is shown,
// never run.
//
// Time grows linearly with the text, whatever a model (or a page it quotes) sends: the block
// patterns are anchored and read a line at most once, inline marks are found by inline.js
// without searching ahead from every opener, and quotes nest at most MAX_DEPTH deep (deeper
// ones are shown as written). Live text (renderLive) keeps the blocks already finished and
// renders again only the block still being written.

import { el } from "./api.js";
import { MAX_DEPTH, inline, isSpace } from "./inline.js";

const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const FENCE = /^\s*(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const QUOTE = /^\s*>\s?(.*)$/;

export function markdown(text) {
  return blocks(linesFrom(String(text || ""), 0).lines, 0);
}

export function renderMarkdown(node, text) {
  live.delete(node);
  node.replaceChildren(markdown(text));
}

// -- live text ------------------------------------------------------------------------------

const live = new WeakMap(); // box -> {text, offset, open, first, last}

// Render `text` into `node`, which holds an earlier render of a text it extends: the finished
// blocks stay (the same nodes), the open ones are rendered again from where they start. A text
// that does not extend the last one (a retried attempt) or a box changed by someone else is
// rendered whole.
export function renderLive(node, text) {
  text = String(text || "");
  let state = live.get(node);
  const intact =
    state &&
    text.startsWith(state.text) &&
    node.firstChild === state.first &&
    node.lastChild === state.last;
  if (!intact) {
    node.replaceChildren();
    state = { text: "", offset: 0, open: [] };
  }
  for (const old of state.open) old.remove();
  const { lines, starts } = linesFrom(text, state.offset);
  // A block is finished once every line it looked at (up to one past its end) is followed
  // by a line break: text added later cannot change it.
  const complete = lines.length - 1;
  let offset = state.offset;
  let finished = true;
  const open = [];
  let i = 0;
  while (i < lines.length) {
    if (!lines[i].trim()) {
      i += 1;
      continue;
    }
    const part = document.createDocumentFragment();
    const end = block(part, lines, i, 0);
    finished = finished && end + 1 < complete;
    if (finished) offset = starts[end];
    else open.push(...part.childNodes);
    node.append(part);
    i = end;
  }
  live.set(node, { text, offset, open, first: node.firstChild, last: node.lastChild });
}

// The lines of `text` from `from` (a line's start), with where each starts in the text.
function linesFrom(text, from) {
  const lines = [];
  const starts = [];
  const breaks = /\r\n?|\n/g;
  breaks.lastIndex = from;
  let start = from;
  for (let m = breaks.exec(text); m; m = breaks.exec(text)) {
    lines.push(text.slice(start, m.index));
    starts.push(start);
    start = m.index + m[0].length;
  }
  lines.push(text.slice(start));
  starts.push(start);
  return { lines, starts };
}

// -- blocks ---------------------------------------------------------------------------------

function blocks(lines, depth) {
  const root = document.createDocumentFragment();
  let i = 0;
  while (i < lines.length) {
    if (!lines[i].trim()) i += 1;
    else i = block(root, lines, i, depth);
  }
  return root;
}

// One block starting at line i, appended to root; returns the line after it.
function block(root, lines, i, depth) {
  const line = lines[i];
  if (FENCE.test(line)) return codeBlock(root, lines, i);
  const head = headingOf(line);
  if (head) {
    // The text sits under the page's own h3s: a model's "#" is an h4.
    root.append(el(`h${Math.min(6, head.level + 3)}`, {}, inline(head.text)));
    return i + 1;
  }
  if (isRule(line)) {
    root.append(el("hr"));
    return i + 1;
  }
  if (LIST_ITEM.test(line)) {
    const [node, next] = parseList(lines, i, indentOf(line));
    root.append(node);
    return next;
  }
  if (QUOTE.test(line)) return quote(root, lines, i, depth);
  return paragraph(root, lines, i);
}

function startsBlock(line) {
  return (
    FENCE.test(line) || !!headingOf(line) || isRule(line) || LIST_ITEM.test(line) || QUOTE.test(line)
  );
}

// "#" to "######", white space, the text; a closing run of "#" after white space is dropped.
function headingOf(line) {
  let level = 0;
  while (line[level] === "#") level += 1;
  if (level < 1 || level > 6 || !isSpace(line[level])) return null;
  let start = level;
  while (start < line.length && isSpace(line[start])) start += 1;
  let end = line.length;
  while (end > start && isSpace(line[end - 1])) end -= 1;
  let hashes = end;
  while (hashes > start && line[hashes - 1] === "#") hashes -= 1;
  if (hashes < end && (hashes === start || isSpace(line[hashes - 1]))) {
    end = hashes;
    while (end > start && isSpace(line[end - 1])) end -= 1;
  }
  return { level, text: line.slice(start, end) };
}

// Three or more of one of "-", "*", "_", with white space anywhere between.
function isRule(line) {
  let mark = null;
  let count = 0;
  for (const ch of line) {
    if (isSpace(ch)) continue;
    if (mark === null && "-*_".includes(ch)) mark = ch;
    if (ch !== mark) return false;
    count += 1;
  }
  return count >= 3;
}

function indentOf(line) {
  return line.match(/^\s*/)[0].length;
}

function codeBlock(root, lines, i) {
  const [, marker, lang] = lines[i].match(FENCE);
  const body = [];
  i += 1;
  while (i < lines.length && !lines[i].trim().startsWith(marker)) body.push(lines[i++]);
  const code = el("code", {}, body.join("\n"));
  if (lang) code.dataset.lang = lang;
  root.append(el("pre", {}, code));
  return i + 1; // past the closing fence (or the end: an unclosed fence runs to the end)
}

function quote(root, lines, i, depth) {
  const inner = [];
  while (i < lines.length && QUOTE.test(lines[i])) inner.push(lines[i++].match(QUOTE)[1]);
  // Nested deeper than MAX_DEPTH, the rest of the quote is shown as written.
  const body =
    depth < MAX_DEPTH ? blocks(inner, depth + 1) : el("p", {}, inline(inner.join("\n")));
  root.append(el("blockquote", {}, body));
  return i;
}

function paragraph(root, lines, i) {
  const body = [];
  while (i < lines.length && lines[i].trim() && !(body.length && startsBlock(lines[i]))) {
    body.push(lines[i++].trim());
  }
  root.append(el("p", {}, inline(body.join("\n")))); // CSS keeps the line breaks
  return i;
}

// One list at `indent`; a deeper item starts a list nested in the item before it.
function parseList(lines, i, indent) {
  const first = lines[i].match(LIST_ITEM);
  const ordered = /\d/.test(first[2]);
  const list = el(ordered ? "ol" : "ul");
  const start = parseInt(first[2], 10);
  if (ordered && start !== 1) list.setAttribute("start", String(start));
  let item = null;
  let words = [];
  const flush = () => {
    if (item && words.length) item.append(inline(words.join("\n")));
    words = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const m = line.match(LIST_ITEM);
    if (m) {
      const depth = m[1].length;
      if (depth < indent) break;
      if (depth > indent && item) {
        flush();
        const [nested, next] = parseList(lines, i, depth);
        item.append(nested);
        i = next;
        continue;
      }
      if (/\d/.test(m[2]) !== ordered) break;
      flush();
      item = el("li");
      list.append(item);
      words = [m[3]];
      i += 1;
    } else if (!line.trim()) {
      // A blank line ends the list unless an item of it follows.
      const next = (lines[i + 1] || "").match(LIST_ITEM);
      if (!next || next[1].length < indent) break;
      i += 1;
    } else if (startsBlock(line)) {
      break;
    } else {
      words.push(line.trim()); // the item goes on
      i += 1;
    }
  }
  flush();
  return [list, i];
}
