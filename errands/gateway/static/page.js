// What the page holds, shared by its modules. An object, so any module can replace a field (a
// module cannot assign another module's exported variable).

export const page = {
  me: null, // GET /v1/me: {id, role, via, auth_required}, or null if the gateway names no one
  info: null, // GET /v1/info: {namespace, temporal_ui}
  sessions: new Map(), // session id -> its tasks (GET /v1/tasks), newest first
  convo: null, // {session, lastSeq, rows: Map<id, row>} of the open session
  current: null, // the task followed (see newWatch in task.js)
};
