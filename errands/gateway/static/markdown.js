// The markdown of what models write, rendered safely: paragraphs, headings, lists, block
// quotes, rules, fenced code, code spans, bold, italic and links (http and https only). It
// builds nodes and puts every piece of text in a text node, so HTML in the text is shown,
// never run.

import { el } from "./api.js";

const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const FENCE = /^\s*(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s*>\s?(.*)$/;

export function markdown(text) {
  const root = document.createDocumentFragment();
  const lines = String(text || "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) i += 1;
    else if (FENCE.test(line)) i = codeBlock(root, lines, i);
    else if (HEADING.test(line)) i = heading(root, lines, i);
    else if (RULE.test(line)) { root.append(el("hr")); i += 1; }
    else if (LIST_ITEM.test(line)) i = listBlock(root, lines, i);
    else if (QUOTE.test(line)) i = quote(root, lines, i);
    else i = paragraph(root, lines, i);
  }
  return root;
}

function startsBlock(line) {
  return [FENCE, HEADING, RULE, LIST_ITEM, QUOTE].some((block) => block.test(line));
}

function listBlock(root, lines, i) {
  const [node, next] = parseList(lines, i, indentOf(lines[i]));
  root.append(node);
  return next;
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

function heading(root, lines, i) {
  const [, hashes, text] = lines[i].match(HEADING);
  // The text sits under the page's own h3s: a model's "#" is an h4.
  root.append(el(`h${Math.min(6, hashes.length + 3)}`, {}, inline(text)));
  return i + 1;
}

function quote(root, lines, i) {
  const inner = [];
  while (i < lines.length && QUOTE.test(lines[i])) inner.push(lines[i++].match(QUOTE)[1]);
  root.append(el("blockquote", {}, markdown(inner.join("\n"))));
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

const INLINE = new RegExp(
  [
    /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/.source, // 1, 2: a code span
    /\[([^\]\n]+)\]\(\s*<?([^\s<>()]+)>?\s*\)/.source, // 3, 4: a link
    /\*\*(?=\S)([\s\S]*?\S)\*\*/.source, // 5: bold
    /(?<!\w)__(?=\S)([\s\S]*?\S)__(?!\w)/.source, // 6: bold
    /\*(?=[^\s*])([\s\S]*?[^\s*])\*/.source, // 7: italic
    /(?<!\w)_(?=[^\s_])([\s\S]*?[^\s_])_(?!\w)/.source, // 8: italic
    /(https?:\/\/[^\s<>"'`]*[^\s<>"'`.,;:!?)\]])/.source, // 9: a bare address
  ].join("|"),
  "g",
);

function inline(text) {
  const out = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.append(text.slice(last, m.index));
    out.append(inlineNode(m));
    last = m.index + m[0].length;
  }
  out.append(text.slice(last));
  return out;
}

function inlineNode(m) {
  if (m[1]) return el("code", {}, m[2]);
  if (m[3] !== undefined) return link(m[4], inline(m[3]), m[0]);
  if (m[5] !== undefined || m[6] !== undefined) return el("strong", {}, inline(m[5] ?? m[6]));
  if (m[7] !== undefined || m[8] !== undefined) return el("em", {}, inline(m[7] ?? m[8]));
  return link(m[9], m[9], m[9]);
}

function link(href, content, literal) {
  let url = null;
  try {
    url = new URL(href);
  } catch (error) {
    url = null; // a relative or malformed address: shown as written
  }
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) return literal;
  const attrs = { href: url.href, target: "_blank", rel: "noopener noreferrer nofollow" };
  return el("a", attrs, content);
}

export function renderMarkdown(node, text) {
  node.replaceChildren(markdown(text));
}
