// Talking to the gateway: the bearer token from the page's field, JSON calls and task paths;
// and the two DOM helpers every module uses: $ (by id) and el, which puts each child in as a
// node or a text node, never as HTML.

export const $ = (id) => document.getElementById(id);

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name === "testid") node.dataset.testid = value;
    else node.setAttribute(name, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

export function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  const token = $("token").value.trim();
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

export async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.detail || `${response.status} ${response.statusText}`);
  return data;
}

export const taskPath = (id, rest) => `/v1/tasks/${encodeURIComponent(id)}${rest || ""}`;
