// The service's JSON API (server/API.md) as the page calls it: one function, typed errors.

/** Where the token is kept: this tab only, forgotten when it closes. */
const TOKEN = "sluicegate.token";

export const token = {
  get: () => sessionStorage.getItem(TOKEN),
  set: (value) => sessionStorage.setItem(TOKEN, value),
  clear: () => sessionStorage.removeItem(TOKEN),
};

/** A refused request: the status, the server's sentence, the field at fault, and for a 409 the current policy. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error ?? `the server answered ${status}`);
    this.status = status;
    this.field = body?.field ?? null;
    this.current = body?.current ?? null;
  }
}

/**
 * Calls `path` (relative to the page, like "v1/apps") with the signed-in token; `body`
 * is sent as JSON, `version` as `If-Match`. Resolves to the parsed reply (null for 204);
 * rejects with an ApiError, or with a TypeError when the server is unreachable.
 */
export async function call(method, path, { body, version } = {}) {
  const headers = { Authorization: `Bearer ${token.get() ?? ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (version !== undefined) headers["If-Match"] = `"${version}"`;
  const response = await fetch(new URL(path, document.baseURI), {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let reply = null;
  try {
    reply = text ? JSON.parse(text) : null;
  } catch {
    reply = { error: text.trim() || null };
  }
  if (!response.ok) throw new ApiError(response.status, reply);
  return reply;
}

/** A path segment: names may hold any character. */
export const segment = encodeURIComponent;
