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
 * The frames go by lanes: in https and websocket one lane (0) takes them all; in https-lanes
 * and websocket-lanes each stream has its own, made by its OPEN (its own X-Lane-ID, X-Up-Seq,
 * X-Down-Cursor and poll, ended by X-Lane-Closed; or its own WebSocket, ended by code 1000,
 * and any other end of it closes only that stream, which the app is told with a CLOSE), and
 * https-lanes' lane 0 takes the session's frames. Queued frames are bounded per session
 * (32 MiB, 16384) and per stream's lane (8 MiB, 1024, as telemt's bridge).
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
    "const overWs = carrier.startsWith('websocket'), laned = carrier.endsWith('-lanes');\n"
    "const maxFrames = 4096, maxBody = 2097152, retries = 8;\n"
    "const maxQueued = 33554432, maxItems = 16384, laneQueued = 8388608, laneItems = 1024;\n"
    "const fetchOpts = {credentials: 'omit', cache: 'no-store', redirect: 'error',\n"
    "                   referrerPolicy: 'no-referrer'};\n"
    "const android = /^#android=([A-Za-z0-9_-]+)$/.exec(location.hash);\n"
    "history.replaceState(null, '', location.pathname);\n"
    "let link = null, token = null, hello = null, closed = false;\n"
    "let queued = 0, items = 0, state = '';\n"
    "const lanes = new Map(), quit = new AbortController();\n"
    "const sleep = ms => new Promise(r => setTimeout(r, ms));\n"
    "const control = msg => { try { link.control(msg); } catch (e) {} };\n"
    "const status = s => { if (s !== state) control({t: 'status', state: (state = s)}); };\n"
    "if (carrier !== 'websocket-lanes') newLane(0);\n"
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
    "/* A lane: frames up in order (q), its own X-Up-Seq and X-Down-Cursor, or its own socket. In\n"
    " * https and websocket lane 0 carries every frame; in the lanes carriers each stream has its\n"
    " * own, made by its OPEN (and https-lanes' lane 0 takes the session's frames). */\n"
    "function newLane(id) {\n"
    "  const l = {id, q: [], bytes: 0, seq: 0, cursor: 0, busy: false, polling: false,\n"
    "             ws: null, open: false, gone: false};\n"
    "  lanes.set(id, l);\n"
    "  return l;\n"
    "}\n"
    "\n"
    "/* The lane an app frame goes up by; none (it is dropped) for a frame no lane takes:\n"
    " * websocket-lanes' session frames, a stream's that never opened or whose lane ended. */\n"
    "function laneOf(f) {\n"
    "  if (!laned) return lanes.get(0);\n"
    "  const b = new Uint8Array(f, 0, 4), id = b[1] << 16 | b[2] << 8 | b[3];\n"
    "  return lanes.get(id) || (id && b[0] === 1 ? newLane(id) : null);\n"
    "}\n"
    "\n"
    "function dropQueue(l) {\n"
    "  queued -= l.bytes;\n"
    "  items -= l.q.length;\n"
    "  l.q.length = l.bytes = 0;\n"
    "}\n"
    "\n"
    "/* The lane ended (or failed): its queued frames go, its stream's later ones are dropped. */\n"
    "function laneGone(l) {\n"
    "  l.gone = true;\n"
    "  lanes.delete(l.id);\n"
    "  dropQueue(l);\n"
    "}\n"
    "\n"
    "function shut(failed) {\n"
    "  if (closed) return;\n"
    "  closed = true;\n"
    "  if (failed) { status('failed'); control({t: 'close'}); }\n"
    "  quit.abort();\n"
    "  for (const l of lanes.values()) if (l.ws) try { l.ws.close(); } catch (e) {}\n"
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
    "  if (carrier === 'websocket')\n"
    "    return openSocket(lanes.get(0), 'tproxy-v1.' + token, welcome);\n"
    "  toApp(welcome);\n"
    "  status('connected');\n"
    "  if (!overWs) downLoop(lanes.get(0));\n"
    "  for (const l of lanes.values()) kick(l);\n"
    "}\n"
    "\n"
    "/* The next body of lane l: whole frames from its queue, within the limits. */\n"
    "function takeBatch(l) {\n"
    "  const q = l.q;\n"
    "  let n = 0, len = 0;\n"
    "  while (n < q.length && n < maxFrames && len + q[n].byteLength <= maxBody)\n"
    "    len += q[n++].byteLength;\n"
    "  const body = new Uint8Array(len), frames = q.splice(0, Math.max(n, 1));\n"
    "  if (n === 0) len = frames[0].byteLength;\n"
    "  queued -= len;\n"
    "  l.bytes -= len;\n"
    "  items -= frames.length;\n"
    "  if (n === 0) return new Uint8Array(frames[0]);\n"
    "  let off = 0;\n"
    "  for (const f of frames) { body.set(new Uint8Array(f), off); off += f.byteLength; }\n"
    "  return body;\n"
    "}\n"
    "\n"
    "/* The headers of lane l's requests (https-lanes: its X-Lane-ID). */\n"
    "function laneHeaders(l, more) {\n"
    "  return Object.assign({'Authorization': 'Bearer ' + token},\n"
    "                       laned ? {'X-Lane-ID': String(l.id)} : {}, more);\n"
    "}\n"
    "\n"
    "/* Lane l's frames go up: https, one /up of the lane at a time; over its socket once open (a\n"
    " * websocket-lanes stream's first frame opens its socket). */\n"
    "function kick(l) {\n"
    "  if (!token || closed || l.gone) return;\n"
    "  if (!overWs) return pumpUp(l);\n"
    "  if (laned && !l.ws) return openSocket(l, 'tproxy-lane-v1.' + token + '.' + l.id);\n"
    "  if (l.open && l.ws.readyState === 1) while (l.q.length) l.ws.send(takeBatch(l));\n"
    "  else if (l.open && l.id) dropQueue(l); /* its lane is closing: nothing more goes up */\n"
    "}\n"
    "\n"
    "async function pumpUp(l) {\n"
    "  if (l.busy) return;\n"
    "  l.busy = true;\n"
    "  while (!closed && l.q.length) {\n"
    "    const body = takeBatch(l), seq = String(++l.seq);\n"
    "    const answer = request('/api/v1/up', laneHeaders(l, {\n"
    "      'Content-Type': 'application/octet-stream', 'X-Up-Seq': seq}), body);\n"
    "    if (laned && !l.polling) downLoop(l); /* a stream's poll starts as its OPEN goes up */\n"
    "    const r = await answer;\n"
    "    if (!r || r.status !== 204 || r.headers.get('X-Up-Ack') !== seq) return shut(1);\n"
    "  }\n"
    "  l.busy = false;\n"
    "}\n"
    "\n"
    "/* Lane l's long polls, each batch to the app in order, until its end (X-Lane-Closed). */\n"
    "async function downLoop(l) {\n"
    "  let cut = 0;\n"
    "  l.polling = true;\n"
    "  while (!closed && !l.gone) {\n"
    "    const r = await request('/api/v1/down',\n"
    "                            laneHeaders(l, {'X-Down-Cursor': String(l.cursor)}));\n"
    "    if (!r || (r.status !== 200 && r.status !== 204)) return shut(1);\n"
    "    if (r.status === 204) {\n"
    "      if (laned && l.id && r.headers.get('X-Lane-Closed') === '1') laneGone(l);\n"
    "      continue;\n"
    "    }\n"
    "    let batch = null;\n"
    "    try { batch = await r.arrayBuffer(); } catch (e) {}\n"
    "    if (!batch) { /* cut short: asked again (the batch is replayed) */\n"
    "      if (++cut >= retries) return shut(1);\n"
    "      await sleep(250);\n"
    "      continue;\n"
    "    }\n"
    "    cut = 0;\n"
    "    const next = Number(r.headers.get('X-Down-Cursor'));\n"
    "    if (!(next > l.cursor)) return shut(1);\n"
    "    toApp(batch);\n"
    "    l.cursor = next;\n"
    "  }\n"
    "}\n"
    "\n"
    "/* The session's socket (websocket: its end fails the session) or a stream's\n"
    " * (websocket-lanes: code 1000 after its lane's last frames; any other end of an open\n"
    " * lane ends only its stream, which the app is told with a CLOSE; a lane that never\n"
    " * opened fails the session). */\n"
    "function openSocket(l, proto, welcome) {\n"
    "  try {\n"
    "    l.ws = new WebSocket('wss://' + location.host + '/api/v1/ws', proto);\n"
    "  } catch (e) { return shut(1); }\n"
    "  l.ws.binaryType = 'arraybuffer';\n"
    "  l.ws.onopen = () => {\n"
    "    l.open = true;\n"
    "    if (welcome) { toApp(welcome); status('connected'); }\n"
    "    kick(l);\n"
    "  };\n"
    "  l.ws.onmessage = ev => { if (ev.data instanceof ArrayBuffer) toApp(ev.data); };\n"
    "  l.ws.onclose = ev => {\n"
    "    if (closed) return;\n"
    "    if (!l.id || !l.open) return shut(1);\n"
    "    laneGone(l);\n"
    "    if (ev.code !== 1000) toApp(new Uint8Array([3, l.id >> 16, l.id >> 8 & 255, l.id & 255,\n"
    "                                                0, 0, 0, 0]).buffer);\n"
    "  };\n"
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
    "  const touched = new Set();\n"
    "  for (const f of split(data)) {\n"
    "    const l = laneOf(f);\n"
    "    if (!l) continue;\n"
    "    l.q.push(f);\n"
    "    l.bytes += f.byteLength;\n"
    "    queued += f.byteLength;\n"
    "    items++;\n"
    "    if (laned && (l.bytes > laneQueued || l.q.length > laneItems)) return shut(1);\n"
    "    touched.add(l);\n"
    "  }\n"
    "  if (queued > maxQueued || items > maxItems) return shut(1);\n"
    "  for (const l of touched) kick(l);\n"
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
