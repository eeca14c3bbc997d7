/* webpage.c: renders the WEB proxy v1 bridge page: HTML, one inline script, a nonce CSP. */
#include "web/webpage.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "crypto/crypto.h"
#include "proto/webcap.h"

/*
 * The page. @NONCE@, @TOKEN@ and @CARRIER@ are replaced when rendering. Plain JavaScript, no
 * build step; every entry point swallows its errors (an exception in the app's boundary
 * handler would kill the carrier). Loop shape:
 *   app -> page: HELLO first (POST /api/v1/session), then frames, batched into /up bodies
 *                of at most maxFrames frames and maxBody bytes, one /up at a time;
 *   page -> app: WELCOME, then every /down batch (split into single frames for the
 *                TelegramWebProxy object, whole for a port).
 * A failed /up or /down (no answer, or a 5xx) is repeated with the same X-Up-Seq and body or
 * the same cursor, after a growing pause (about 23 s in all, then the session has failed): the
 * relay answers an exact repeat as before (docs/web.md 4). Status messages tell the app
 * connecting, connected, reconnecting (while retrying) and failed (then {t: 'close'}: the
 * session cannot go on). The app's {t: 'close'}, or the page going away, stops every request
 * and DELETEs the session.
 */
static const char page[] =
    "<!doctype html>\n"
    "<html><head><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">\n"
    "<title></title></head><body>\n"
    "<script nonce=\"@NONCE@\">\n"
    "'use strict';\n"
    "(() => {\n"
    "const bootstrap=\"@TOKEN@\";\n"
    "const bootstrapAuth = {'Authorization': 'Bearer @TOKEN@'};\n"
    "const carrier = '@CARRIER@';\n"
    "const maxFrames = 4096, maxBody = 2097152, retries = 8;\n"
    "const maxQueued = 33554432, maxItems = 16384;\n"
    "const fetchOpts = {credentials: 'omit', cache: 'no-store', redirect: 'error',\n"
    "                   referrerPolicy: 'no-referrer'};\n"
    "const android = /^#android=([A-Za-z0-9_-]+)$/.exec(location.hash);\n"
    "history.replaceState(null, '', location.pathname);\n"
    "let link = null, token = null, hello = null, closed = false, upBusy = false, ws = null;\n"
    "let upSeq = 0, cursor = 0, queued = 0, state = '';\n"
    "const upQueue = [], quit = new AbortController();\n"
    "const sleep = ms => new Promise(r => setTimeout(r, ms));\n"
    "const control = msg => { try { link.control(msg); } catch (e) {} };\n"
    "const status = s => { if (s !== state) control({t: 'status', state: (state = s)}); };\n"
    "\n"
    "/* The frames of a batch (8-byte header: type, stream u24, len u32, big-endian). */\n"
    "function split(buf) {\n"
    "  const v = new DataView(buf), out = [];\n"
    "  for (let off = 0; off < buf.byteLength;) {\n"
    "    if (buf.byteLength - off < 8) throw new Error('partial');\n"
    "    const end = off + 8 + v.getUint32(off + 4);\n"
    "    if (end > buf.byteLength) throw new Error('partial');\n"
    "    out.push(buf.slice(off, end));\n"
    "    off = end;\n"
    "  }\n"
    "  return out;\n"
    "}\n"
    "\n"
    "function shut(failed) {\n"
    "  if (closed) return;\n"
    "  closed = true;\n"
    "  if (failed) { status('failed'); control({t: 'close'}); }\n"
    "  quit.abort();\n"
    "  if (ws) try { ws.close(); } catch (e) {}\n"
    "  if (token) fetch('/api/v1/session', Object.assign({method: 'DELETE', keepalive: true,\n"
    "    headers: {'Authorization': 'Bearer ' + token}}, fetchOpts)).catch(() => {});\n"
    "}\n"
    "\n"
    "function toApp(buf) {\n"
    "  if (!closed) link.send(buf);\n"
    "}\n"
    "\n"
    "/* One request, repeated as it was after a network error, a 5xx or 90 s of silence. */\n"
    "async function request(path, headers, body) {\n"
    "  for (let i = 0, pause = 250; !closed && i < retries; i++) {\n"
    "    const ac = new AbortController(), stop = () => ac.abort();\n"
    "    const timer = setTimeout(stop, 90000);\n"
    "    quit.signal.addEventListener('abort', stop);\n"
    "    let r = null;\n"
    "    try {\n"
    "      r = await fetch(path, Object.assign({method: 'POST', headers, body,\n"
    "                                           signal: ac.signal}, fetchOpts));\n"
    "    } catch (e) {}\n"
    "    clearTimeout(timer);\n"
    "    quit.signal.removeEventListener('abort', stop);\n"
    "    if (closed) return null;\n"
    "    if (r && r.status < 500) {\n"
    "      if (state === 'reconnecting') status(token ? 'connected' : 'connecting');\n"
    "      return r;\n"
    "    }\n"
    "    status('reconnecting');\n"
    "    await sleep(pause + Math.random() * pause / 4);\n"
    "    pause = Math.min(2 * pause, 5000);\n"
    "  }\n"
    "  return null;\n"
    "}\n"
    "\n"
    "async function createSession() {\n"
    "  status('connecting');\n"
    "  const r = await request('/api/v1/session', Object.assign(\n"
    "    {'Content-Type': 'application/octet-stream'}, bootstrapAuth), hello);\n"
    "  if (!r || r.status !== 200 || r.headers.get('X-Carrier-Mode') !== carrier) return shut(1);\n"
    "  token = r.headers.get('X-Session-Token');\n"
    "  const welcome = await r.arrayBuffer();\n"
    "  if (!token || welcome.byteLength !== 8 || new Uint8Array(welcome)[0] !== 0x11)\n"
    "    return shut(1);\n"
    "  if (carrier === 'websocket') return openSocket(welcome);\n"
    "  if (carrier !== 'https') return shut(1);\n"
    "  toApp(welcome);\n"
    "  status('connected');\n"
    "  pumpUp();\n"
    "  downLoop();\n"
    "}\n"
    "\n"
    "/* The next /up body: whole frames from the queue, within the limits. */\n"
    "function takeBatch() {\n"
    "  let n = 0, len = 0;\n"
    "  while (n < upQueue.length && n < maxFrames && len + upQueue[n].byteLength <= maxBody)\n"
    "    len += upQueue[n++].byteLength;\n"
    "  const body = new Uint8Array(len), frames = upQueue.splice(0, Math.max(n, 1));\n"
    "  queued -= n ? len : frames[0].byteLength;\n"
    "  if (n === 0) return new Uint8Array(frames[0]);\n"
    "  let off = 0;\n"
    "  for (const f of frames) { body.set(new Uint8Array(f), off); off += f.byteLength; }\n"
    "  return body;\n"
    "}\n"
    "\n"
    "async function pumpUp() {\n"
    "  if (upBusy || !token || closed || carrier !== 'https') return;\n"
    "  upBusy = true;\n"
    "  while (!closed && upQueue.length) {\n"
    "    const body = takeBatch(), seq = String(++upSeq);\n"
    "    const r = await request('/api/v1/up', {'Authorization': 'Bearer ' + token,\n"
    "      'Content-Type': 'application/octet-stream', 'X-Up-Seq': seq}, body);\n"
    "    if (!r || r.status !== 204 || r.headers.get('X-Up-Ack') !== seq) return shut(1);\n"
    "  }\n"
    "  upBusy = false;\n"
    "}\n"
    "\n"
    "async function downLoop() {\n"
    "  while (!closed) {\n"
    "    const r = await request('/api/v1/down', {'Authorization': 'Bearer ' + token,\n"
    "      'X-Down-Cursor': String(cursor)});\n"
    "    if (!r || (r.status !== 200 && r.status !== 204)) return shut(1);\n"
    "    if (r.status === 204) continue;\n"
    "    const batch = await r.arrayBuffer(), next = Number(r.headers.get('X-Down-Cursor'));\n"
    "    if (!(next > cursor)) return shut(1);\n"
    "    toApp(batch);\n"
    "    cursor = next;\n"
    "  }\n"
    "}\n"
    "\n"
    "function openSocket(welcome) {\n"
    "  try {\n"
    "    ws = new WebSocket('wss://' + location.host + '/api/v1/ws', 'tproxy-v1.' + token);\n"
    "  } catch (e) { return shut(1); }\n"
    "  ws.binaryType = 'arraybuffer';\n"
    "  ws.onopen = () => {\n"
    "    toApp(welcome);\n"
    "    status('connected');\n"
    "    while (upQueue.length) ws.send(takeBatch());\n"
    "  };\n"
    "  ws.onmessage = ev => { if (ev.data instanceof ArrayBuffer) toApp(ev.data); };\n"
    "  ws.onclose = () => shut(1);\n"
    "}\n"
    "\n"
    "/* Whatever the app sends: its HELLO, then whole frames (else the session fails); or a\n"
    " * control message (JSON in a string over the injected object: other strings are let be). */\n"
    "function fromApp(data) {\n"
    "  if (closed) return;\n"
    "  if (typeof data === 'string') try { data = JSON.parse(data); } catch (e) { return; }\n"
    "  if (!(data instanceof ArrayBuffer)) {\n"
    "    if (data && data.t === 'close') shut(0);\n"
    "    return;\n"
    "  }\n"
    "  if (!hello) {\n"
    "    hello = data;\n"
    "    createSession();\n"
    "    return;\n"
    "  }\n"
    "  for (const f of split(data)) { upQueue.push(f); queued += f.byteLength; }\n"
    "  if (queued > maxQueued || upQueue.length > maxItems) return shut(1);\n"
    "  if (ws && ws.readyState === 1) while (upQueue.length) ws.send(takeBatch());\n"
    "  pumpUp();\n"
    "}\n"
    "\n"
    "/* The app's boundary: a port from a numeric-loopback parent frame ... */\n"
    "addEventListener('message', ev => {\n"
    "  try {\n"
    "    if (link || ev.source !== parent || parent === window) return;\n"
    "    const d = ev.data, keys = d && typeof d === 'object' ? Object.keys(d).sort() : [];\n"
    "    if (keys.join() !== 't,v' || d.t !== 'tproxy-init' || d.v !== 1) return;\n"
    "    if (!ev.ports || ev.ports.length !== 1) return;\n"
    "    const from = new URL(ev.origin);\n"
    "    if (from.protocol !== 'http:' || from.hostname !== '127.0.0.1' || !from.port ||\n"
    "        from.origin !== ev.origin) return;\n"
    "    const port = ev.ports[0];\n"
    "    link = {send: buf => port.postMessage(buf, [buf]),\n"
    "            control: msg => port.postMessage(msg)};\n"
    "    port.onmessage = m => { try { fromApp(m.data); } catch (e) { shut(1); } };\n"
    "    port.start();\n"
    "  } catch (e) {}\n"
    "});\n"
    "\n"
    "/* ... or the object the app injected, which the #android= fragment announces. */\n"
    "const native = globalThis.TelegramWebProxy;\n"
    "if (android && native && typeof native.postMessage === 'function') {\n"
    "  link = {\n"
    "    send: buf => { for (const f of split(buf)) native.postMessage(f); },\n"
    "    control: msg => native.postMessage(JSON.stringify(msg)),\n"
    "  };\n"
    "  native.onmessage = m => { try { fromApp(m.data); } catch (e) { shut(1); } };\n"
    "  link.control({t: 'tproxy-android-init', v: 1, nonce: android[1]});\n"
    "}\n"
    "addEventListener('pagehide', () => shut(0));\n"
    "})();\n"
    "</script>\n"
    "</body></html>\n";

static int token_ok(const char *token)
{
    if (!token || strlen(token) != WEBSESS_TOKEN_LEN)
        return 0;
    for (const char *p = token; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_'))
            return 0;
    return 1;
}

int webpage_render(const char *token, enum websess_mode mode, const char *host, struct sbuf *out,
                   char csp[WEBPAGE_CSP_MAX])
{
    uint8_t raw[16];
    char nonce[WEBPAGE_NONCE_LEN + 1], name[WEBCAP_HOST_MAX + 1];
    if (!token_ok(token) || !host || webcap_host(host, strlen(host), name, sizeof name) < 0 ||
        strcmp(name, host) || crypto_random(raw, sizeof raw) != 0)
        return -1;
    webcap_b64url(raw, sizeof raw, nonce, sizeof nonce);
    /* wss://HOST beside 'self': engines before CSP 3 do not let 'self' match wss. The sandbox
     * takes popups, forms, top navigation and the like away from the page (P 4). */
    snprintf(csp, WEBPAGE_CSP_MAX,
             "default-src 'none'; script-src 'nonce-%s'; connect-src 'self' wss://%s; "
             "base-uri 'none'; form-action 'none'; frame-ancestors http://127.0.0.1:*; "
             "sandbox allow-same-origin allow-scripts",
             nonce, host);
    const struct {
        const char *key, *value;
    } subst[] = {{"@NONCE@", nonce}, {"@TOKEN@", token}, {"@CARRIER@", websess_mode_name(mode)}};
    const char *p = page;
    while (*p) {
        const char *at = strchr(p, '@');
        size_t k = 0;
        while (at && k < sizeof subst / sizeof subst[0] &&
               strncmp(at, subst[k].key, strlen(subst[k].key)) != 0)
            k++;
        if (!at || k == sizeof subst / sizeof subst[0]) {
            size_t n = at ? (size_t)(at - p) + 1 : strlen(p);
            sbuf_add(out, p, n);
            p += n;
            continue;
        }
        sbuf_add(out, p, (size_t)(at - p));
        sbuf_add(out, subst[k].value, strlen(subst[k].value));
        p = at + strlen(subst[k].key);
    }
    return out->failed ? -1 : 0;
}
