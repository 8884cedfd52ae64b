// Who the page acts as. It asks GET /v1/me on load and after each sign-in; a 401 (no token, a
// wrong, revoked or expired one) shows the sign-in prompt, with the server's reason when a
// token was sent, and hides everything else. The token is kept for the tab only
// (sessionStorage); Sign out forgets it. Leaving clears everything the principal saw, so whoever
// signs in next starts from an empty page.

import { $, api, auth, setToken } from "./api.js";
import { page } from "./page.js";

const hooks = { enter: async () => {}, leave: () => {} };

// enter(): load what the principal now signed in sees; leave(): clear all of it.
export function bindSignIn(enter, leave) {
  hooks.enter = enter;
  hooks.leave = leave;
  auth.refused = (reason) => signOut(auth.token ? reason : "");
  $("sign-in").addEventListener("submit", submitted);
  $("sign-out").addEventListener("click", () => signOut(""));
}

// Asks who the token (or the loopback) stands for, then shows the page as that principal.
export async function signIn() {
  let me = null;
  $("who-error").textContent = "";
  try {
    me = await api("GET", "/v1/me");
  } catch (error) {
    if (error.status === 401) return; // auth.refused showed the prompt
    if (!$("sign-in-panel").hidden) {
      // A sign-in that failed otherwise (too many wrong tokens, the gateway down): try again.
      setToken("");
      $("sign-in-error").textContent = error.message;
      return;
    }
    // A gateway that names no one (no /v1/me) still serves the page; other calls say the rest.
    if (error.status !== 404) $("who-error").textContent = error.message;
  }
  // The loopback user needs no token: one kept from an earlier gateway is dropped, so Sign out
  // (which would ask for a token nobody needs) does not show.
  if (me && me.via === "local" && auth.token) setToken("");
  page.me = me;
  showWho(me);
  $("sign-in-panel").hidden = true;
  $("sign-in-error").textContent = "";
  $("app").hidden = false;
  await hooks.enter();
}

// Forgets the token for this tab, clears the page and shows the prompt, with `reason` (the
// server's words on a refused token; never the token).
export function signOut(reason) {
  setToken("");
  page.me = null;
  hooks.leave();
  $("app").hidden = true;
  $("who").hidden = true;
  $("sign-in-panel").hidden = false;
  $("sign-in-error").textContent = reason;
  $("token").focus();
}

async function submitted(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  $("token").value = "";
  $("sign-in-error").textContent = "";
  if (!token) {
    $("sign-in-error").textContent = "Paste a token first.";
    return;
  }
  setToken(token);
  await signIn();
}

function showWho(me) {
  $("who").hidden = false;
  const text = $("who-text");
  if (!me) text.textContent = "";
  else if (me.via === "local") text.textContent = "local, no sign-in needed";
  else text.textContent = `Signed in as ${me.id} (${me.role})`;
  text.dataset.principal = me ? me.id : "";
  $("sign-out").hidden = !auth.token;
}
