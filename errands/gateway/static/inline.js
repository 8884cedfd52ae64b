// The inline marks of markdown.js in one text: code spans, links, bold, italic and bare
// addresses, built as nodes with every piece of text in a text node.
//
// Linear in the text: each closing delimiter is read from a table built once per text (the
// first closer at or after a position), never searched for from every opener, and marks nest
// at most MAX_DEPTH deep (deeper ones are shown as written).

import { el } from "./api.js";

export const MAX_DEPTH = 8;

export function inline(text) {
  const out = document.createDocumentFragment();
  new Inline(text).span(out, 0, text.length, 0);
  return out;
}

// Code spans (a run of backticks closed by the next run of the same length), links
// [text](http…), bold **…** and __…__, italic *…* and _…_ (the underscores not inside a word),
// and bare http(s) addresses. At each position the first of these that matches wins, as it
// would in one regular expression; each closer is read from a table (next[i]: the first
// closer at or after i), so no opener searches ahead.
class Inline {
  constructor(text) {
    this.text = text;
    this.tables = new Map();
    this.tails = new Map();
  }

  // The table of one kind of closer, built the first time a text needs it.
  table(kind) {
    if (!this.tables.has(kind)) this.tables.set(kind, this.build(kind));
    return this.tables.get(kind);
  }

  build(kind) {
    const t = this.text;
    const n = t.length;
    const code = (i) => t.charCodeAt(i);
    const STAR = 42;
    switch (kind) {
      case "]":
        return nextWhere(n, (i) => code(i) === 93);
      case "\n":
        return nextWhere(n, (i) => code(i) === 10);
      case "**":
        return nextWhere(
          n,
          (i) => code(i) === STAR && code(i + 1) === STAR && i > 0 && !isSpace(t[i - 1]),
        );
      case "__":
        return nextWhere(n, (i) => this.underPair(i) && !isWord(t[i + 2]));
      case "*":
        return nextWhere(
          n,
          (i) => code(i) === STAR && i > 0 && !isSpace(t[i - 1]) && code(i - 1) !== STAR,
        );
      case "_":
        return nextWhere(n, (i) => this.underOne(i) && !isWord(t[i + 1]));
      case "stop":
        return nextWhere(n, (i) => isSpace(t[i]) || '<>"\'`'.includes(t[i]));
      case "good":
        return lastWhere(n, (i) => !".,;:!?)]".includes(t[i]));
      default:
        return sameRuns(t);
    }
  }

  underPair(i) {
    const t = this.text;
    return t[i] === "_" && t[i + 1] === "_" && i > 0 && !isSpace(t[i - 1]);
  }

  underOne(i) {
    const t = this.text;
    return t[i] === "_" && i > 0 && !isSpace(t[i - 1]) && t[i - 1] !== "_";
  }

  // Renders text[lo, hi) into out; the range's ends count as the text's ends.
  span(out, lo, hi, depth) {
    const t = this.text;
    if (depth > MAX_DEPTH) {
      out.append(t.slice(lo, hi));
      return out;
    }
    let last = lo;
    let p = lo;
    while (p < hi) {
      const ch = t[p];
      let found = null;
      if (ch === "`") {
        const [close, run] = this.table("`").get(p) || [-1, 1];
        if (close < 0 || close + run > hi) {
          p += run; // no closing run of the same length: the backticks are text
          continue;
        }
        found = [el("code", {}, t.slice(p + run, close)), close + run];
      } else if (ch === "[") found = this.link(p, hi, depth);
      else if (ch === "*" || ch === "_") found = this.emphasis(p, lo, hi, depth);
      else if (ch === "h") found = this.address(p, hi);
      if (!found) {
        p += 1;
        continue;
      }
      if (p > last) out.append(t.slice(last, p));
      out.append(found[0]);
      p = last = found[1];
    }
    if (hi > last) out.append(t.slice(last, hi));
    return out;
  }

  emphasis(p, lo, hi, depth) {
    const t = this.text;
    const ch = t[p];
    const wordBefore = ch === "_" && p > lo && isWord(t[p - 1]);
    if (t[p + 1] === ch && p + 2 < hi && !isSpace(t[p + 2]) && !wordBefore) {
      let q = after(this.table(ch + ch), p + 3, hi - 2);
      // The range's end is a word boundary: "__" that ends the range closes it.
      if (q < 0 && ch === "_" && hi - 2 >= p + 3 && this.underPair(hi - 2)) q = hi - 2;
      if (q >= 0) return [this.wrap("strong", p + 2, q, depth), q + 2];
    }
    if (p + 1 < hi && !isSpace(t[p + 1]) && t[p + 1] !== ch && !wordBefore) {
      let q = after(this.table(ch), p + 2, hi - 1);
      if (q < 0 && ch === "_" && hi - 1 >= p + 2 && this.underOne(hi - 1)) q = hi - 1;
      if (q >= 0) return [this.wrap("em", p + 1, q, depth), q + 1];
    }
    return null;
  }

  wrap(tag, lo, hi, depth) {
    return el(tag, {}, this.span(document.createDocumentFragment(), lo, hi, depth + 1));
  }

  // [text](address): the text has no "]" and no line break.
  link(p, hi, depth) {
    const close = this.table("]")[p + 1];
    if (close < 0 || close <= p + 1 || close >= hi) return null;
    const newline = this.table("\n")[p + 1];
    if (newline >= 0 && newline < close) return null;
    const tail = this.tail(close);
    if (!tail || tail.end > hi) return null;
    const href = safeHref(tail.href);
    if (!href) return [this.text.slice(p, tail.end), tail.end]; // shown as written
    const content = this.span(document.createDocumentFragment(), p + 1, close, depth + 1);
    return [anchor(href, content), tail.end];
  }

  // "(", white space, an address (optionally in <>), white space, ")" after the "]" at close;
  // read once per "]": the reads of two "]" never overlap, since "(" ends an address.
  tail(close) {
    if (this.tails.has(close)) return this.tails.get(close);
    const t = this.text;
    let found = null;
    if (t[close + 1] === "(") {
      let j = close + 2;
      while (isSpace(t[j])) j += 1;
      if (t[j] === "<") j += 1;
      const from = j;
      while (j < t.length && !isSpace(t[j]) && !"<>()".includes(t[j])) j += 1;
      const href = t.slice(from, j);
      if (t[j] === ">") j += 1;
      while (isSpace(t[j])) j += 1;
      if (href && t[j] === ")") found = { href, end: j + 1 };
    }
    this.tails.set(close, found);
    return found;
  }

  // A bare http(s) address, up to white space or a quote, less its trailing punctuation.
  address(p, hi) {
    const t = this.text;
    const scheme = t.startsWith("https://", p) ? 8 : t.startsWith("http://", p) ? 7 : 0;
    if (!scheme || p + scheme >= hi) return null;
    const from = p + scheme;
    const stop = this.table("stop")[from];
    const end = stop < 0 || stop > hi ? hi : stop;
    const good = this.table("good")[end - 1];
    if (good < from) return null;
    const href = t.slice(p, good + 1);
    const safe = safeHref(href);
    return [safe ? anchor(safe, href) : href, good + 1];
  }
}

// next[i]: the least j >= i with test(j), or -1.
function nextWhere(n, test) {
  const next = new Int32Array(n + 2).fill(-1);
  for (let i = n - 1; i >= 0; i -= 1) next[i] = test(i) ? i : next[i + 1];
  return next;
}

// last[i]: the greatest j <= i with test(j), or -1.
function lastWhere(n, test) {
  const last = new Int32Array(n + 1).fill(-1);
  for (let i = 0; i < n; i += 1) last[i] = test(i) ? i : i > 0 ? last[i - 1] : -1;
  return last;
}

// The first table entry at or after `from`, if it is at most `max`.
function after(table, from, max) {
  if (from > max) return -1;
  const q = table[from];
  return q >= 0 && q <= max ? q : -1;
}

// Each run of backticks: its start -> [the start of the next run of the same length or -1,
// its length].
function sameRuns(text) {
  const runs = [];
  for (let i = text.indexOf("`"); i >= 0; ) {
    let j = i;
    while (text[j] === "`") j += 1;
    runs.push([i, j - i]);
    i = text.indexOf("`", j);
  }
  const byStart = new Map();
  const nextOfLength = new Map();
  for (let k = runs.length - 1; k >= 0; k -= 1) {
    const [start, length] = runs[k];
    byStart.set(start, [nextOfLength.has(length) ? nextOfLength.get(length) : -1, length]);
    nextOfLength.set(length, start);
  }
  return byStart;
}

function safeHref(href) {
  let url = null;
  try {
    url = new URL(href);
  } catch (error) {
    return null; // a relative or malformed address: shown as written
  }
  return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
}

function anchor(href, content) {
  return el("a", { href, target: "_blank", rel: "noopener noreferrer nofollow" }, content);
}

export function isSpace(ch) {
  const c = ch === undefined ? 0 : ch.charCodeAt(0);
  return c === 32 || (c >= 9 && c <= 13) || (c > 127 && /\s/.test(ch));
}

export function isWord(ch) {
  return ch !== undefined && /\w/.test(ch);
}
