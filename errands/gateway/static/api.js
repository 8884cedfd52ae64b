// Talking to the gateway: the bearer token the tab signed in with, JSON calls and task paths;
// and the two DOM helpers every module uses: $ (by id) and el, which puts each child in as a
// node or a text node, never as HTML.
// The token is kept for the tab only (sessionStorage) and sent as a header, never shown. A 401
// on any call means it no longer works (revoked, expired): auth.refused(reason) brings the
// sign-in prompt back (signin.js).

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

const TOKEN_KEY = "errands.token";

export const auth = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  // Counts sign-ins and sign-outs: an answer to a call made as someone else is dropped.
  epoch: 0,
  refused: (reason) => {}, // set by signin.js
};

export function setToken(token) {
  auth.token = token;
  auth.epoch += 1;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  if (auth.token) h.Authorization = "Bearer " + auth.token;
  return h;
}

// A refusal: the server's reason (its `detail`) and the HTTP status.
export class ApiError extends Error {
  constructor(status, reason) {
    super(reason);
    this.status = status;
  }
}

// Never settles: what a call made before a sign-out or sign-in would have shown belongs to the
// principal who made it, so nothing waiting on it runs on.
const dropped = () => new Promise(() => {});

export async function api(method, path, body) {
  const epoch = auth.epoch;
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (auth.epoch !== epoch) return dropped();
  const reason = data.detail || `${response.status} ${response.statusText}`;
  if (response.status === 401) auth.refused(reason);
  if (!response.ok) throw new ApiError(response.status, reason);
  return data;
}

export const taskPath = (id, rest) => `/v1/tasks/${encodeURIComponent(id)}${rest || ""}`;
