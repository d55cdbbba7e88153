/*!
 * idem-stream.js — JavaScript client for idem event streams
 * (Go package github.com/idemhq/idem/stream; the Go server serves this file at /idem-stream.js).
 * No dependencies, plain ES2017. Load it with <script src="/idem-stream.js"></script>
 * (it defines window.IdemStream) or require() it (module.exports = IdemStream).
 *
 * WHAT IT GIVES YOU
 *   Every event of one channel, each exactly once, in seq order (1, 2, 3, ...), across
 *   disconnects, server restarts and kicks. The client remembers the last seq it handed to
 *   you (s.lastSeq); on every (re)connect it asks the server for the events after it, drops
 *   any event it has already delivered and, if the socket ever skips a seq, fetches the
 *   missing events over REST before going on. Persist s.lastSeq (e.g. in localStorage) and
 *   pass it back as `since` to resume after a page reload.
 *
 * USAGE
 *   const s = new IdemStream({
 *     channel: "orders",                 // required
 *     onEvent: (evt) => { ... },         // required: evt = {seq, type, id, data, at}
 *     onHint:  (evt) => { ... },         // optional: events without data ("hints": fetch the
 *                                        //   entity evt.id yourself); without onHint they go to onEvent
 *     onState: (state, info) => { ... }, // optional: "connecting" | "open" | "closed";
 *                                        //   info is {code, reason} for "closed", {head} for "open"
 *     onError: (err) => { ... },         // optional: error frames from the server (err.code),
 *                                        //   failed REST catch-ups, exceptions thrown by your callbacks
 *     since: 0,                          // last seq you already have (default 0: from the start)
 *     client: "device-1",                // optional client id for acks; default: a random UUID kept
 *                                        //   for the tab's life in sessionStorage ("idem-stream-client")
 *     baseUrl: "https://host/api",       // REST base; default: derived from url, else location.origin
 *     url: "wss://host/api/stream",      // WebSocket URL; default: baseUrl + "/stream" (http->ws)
 *     minBackoff: 100, maxBackoff: 5000, // reconnect delay bounds in ms (exponential, with jitter)
 *     heartbeatTimeout: 45000,           // ms without any frame => connection is dead, reconnect
 *     WebSocket: WebSocket, fetch: fetch // optional implementations (e.g. for Node)
 *   });
 *   s.start();        // connect; reconnects by itself until close()
 *   s.lastSeq         // seq of the last event handed to onEvent/onHint
 *   s.client          // the client id the server records acks under
 *   s.state           // "connecting" | "open" | "closed"
 *   s.reconnects      // how many times it has reconnected
 *   s.close();        // stop for good (create a new IdemStream with since: s.lastSeq to resume)
 *
 * SEMANTICS
 *   - Callbacks run one at a time, in seq order. lastSeq advances when an event is handed to
 *     your callback; if the callback throws, the error goes to onError and the event still
 *     counts as delivered (it is not retried).
 *   - Processed events are acknowledged to the server ({"type":"ack","seq":lastSeq}) at most
 *     every ~100 ms or every 50 events.
 *   - After any close or error the client reconnects after a random delay between minBackoff
 *     and an exponentially growing bound (capped at maxBackoff); the bound resets once the
 *     server accepts the connection ("ready"). The server heartbeats every 15 s by default, so
 *     the default heartbeatTimeout (45 s) declares a silent connection dead after 3 missed beats.
 *   - If the server no longer has the events after lastSeq (they were trimmed: error frame
 *     code "trimmed", close 4409, or REST 410), onError receives an error with
 *     err.code === "trimmed". The client keeps retrying, which cannot succeed: reload your
 *     state, close() this stream and start a new one from the channel's current head.
 *   - Each client id has its own ack position on the server, and the server trims only what
 *     every known client of the channel acked; so two tabs must not share an id. The default
 *     id is random per tab (a tab duplicated by the browser copies its sessionStorage, and so
 *     its id: pass `client` yourself if that matters). Do not derive ids from user data: an id
 *     is not a secret, but a hostile reader who learns another's id could move its acks.
 *   - Nothing is logged to the console.
 *
 * WIRE PROTOCOL (text frames, one JSON object each)
 *   client -> server: {"type":"hello","channel":C,"since":N,"client":ID,"batch":true}, {"type":"ack","seq":S}
 *   server -> client: {"type":"ready","channel":C,"client":ID,"head":H}, {"type":"event","event":{...}},
 *                     {"type":"events","events":[{...},...]} (several events in order, to a client whose
 *                     hello said "batch":true), {"type":"heartbeat","head":H},
 *                     {"type":"error","code":...,"message":...}
 *   REST catch-up:    GET {baseUrl}/events?channel=C&since=N -> {"channel","head","events":[...]}
 */
(function () {
  'use strict';

  function resolveBase(base) {
    if (typeof URL === 'function' && typeof location !== 'undefined' && location && location.href) {
      try { return new URL(base, location.href).href; } catch (e) { /* keep as given */ }
    }
    return base;
  }

  function wsToHttp(url) {
    var u = String(url).split('#')[0].split('?')[0];
    u = u.replace(/^ws(s?):/i, 'http$1:');
    return u.replace(/\/stream\/?$/, '');
  }

  function httpToWs(url) {
    return String(url).replace(/^http(s?):/i, 'ws$1:');
  }

  var CLIENT_KEY = 'idem-stream-client';

  // randomId is a UUIDv4: crypto.randomUUID where the page is a secure context,
  // else built from crypto.getRandomValues (available everywhere crypto is).
  function randomId() {
    var c = typeof crypto !== 'undefined' ? crypto : null;
    if (c && typeof c.randomUUID === 'function') return c.randomUUID();
    var b = new Uint8Array(16);
    if (c && typeof c.getRandomValues === 'function') c.getRandomValues(b);
    else for (var i = 0; i < 16; i++) b[i] = Math.floor(Math.random() * 256);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    var h = Array.prototype.map.call(b, function (x) { return (x + 0x100).toString(16).slice(1); }).join('');
    return h.slice(0, 8) + '-' + h.slice(8, 12) + '-' + h.slice(12, 16) + '-' + h.slice(16, 20) + '-' + h.slice(20);
  }

  // defaultClientId is this tab's id: kept in sessionStorage (one per tab, kept across
  // reloads) when the page may use it, else new for this IdemStream.
  function defaultClientId() {
    var store = null;
    try { store = typeof sessionStorage !== 'undefined' ? sessionStorage : null; } catch (e) { /* blocked */ }
    try {
      var id = store && store.getItem(CLIENT_KEY);
      if (id) return id;
    } catch (e) { /* blocked */ }
    id = randomId();
    try { store && store.setItem(CLIENT_KEY, id); } catch (e) { /* blocked or full */ }
    return id;
  }

  function num(v, def) {
    return typeof v === 'number' && isFinite(v) && v >= 0 ? v : def;
  }

  class IdemStream {
    constructor(opts) {
      opts = opts || {};
      if (typeof opts.channel !== 'string' || opts.channel === '') {
        throw new TypeError('IdemStream: option "channel" (non-empty string) is required');
      }
      if (typeof opts.onEvent !== 'function') {
        throw new TypeError('IdemStream: option "onEvent" (function) is required');
      }
      var base = opts.baseUrl;
      if (!base && opts.url) base = wsToHttp(resolveBase(opts.url));
      if (!base && typeof location !== 'undefined' && location && location.origin) base = location.origin;
      if (!base) throw new TypeError('IdemStream: give "baseUrl" or "url"');
      base = resolveBase(base).replace(/\/+$/, '');

      this.channel = opts.channel;
      this.client = typeof opts.client === 'string' && opts.client ? opts.client : defaultClientId();
      this.baseUrl = base;
      this.url = opts.url ? resolveBase(opts.url) : httpToWs(base) + '/stream';
      this.minBackoff = num(opts.minBackoff, 100);
      this.maxBackoff = Math.max(this.minBackoff, num(opts.maxBackoff, 5000));
      this.heartbeatTimeout = num(opts.heartbeatTimeout, 3 * 15000) || 3 * 15000;
      this.reconnects = 0;

      this._onEvent = opts.onEvent;
      this._onHint = typeof opts.onHint === 'function' ? opts.onHint : null;
      this._onState = typeof opts.onState === 'function' ? opts.onState : null;
      this._onError = typeof opts.onError === 'function' ? opts.onError : null;
      this._WS = opts.WebSocket || (typeof WebSocket !== 'undefined' ? WebSocket : null);
      this._fetch = opts.fetch || (typeof fetch === 'function' ? fetch.bind(typeof window !== 'undefined' ? window : undefined) : null);

      this._seq = num(opts.since, 0);
      this._acked = this._seq;
      this._connMax = this._seq;
      this._helloSince = this._seq;
      this._unacked = 0;
      this._ackTimer = null;
      this._state = 'closed';
      this._started = false;
      this._closed = false;
      this._ws = null;
      this._gen = 0;          // connection generation; frames of older sockets are ignored
      this._attempt = 0;      // backoff exponent
      this._retryTimer = null;
      this._hbTimer = null;
      this._queue = [];       // frames waiting for the (sequential) pump
      this._pumping = false;
    }

    get lastSeq() { return this._seq; }
    get state() { return this._state; }

    start() {
      if (this._started || this._closed) return this;
      if (!this._WS) throw new Error('IdemStream: no WebSocket implementation (pass option "WebSocket")');
      this._started = true;
      this._connect();
      return this;
    }

    close() {
      if (this._closed) return;
      this._closed = true;
      this._gen++;
      clearTimeout(this._retryTimer); this._retryTimer = null;
      clearTimeout(this._hbTimer); this._hbTimer = null;
      this._flushAck();
      clearTimeout(this._ackTimer); this._ackTimer = null;
      this._closeSocket(1000, 'client closed');
      this._queue = [];
      this._setState('closed', { code: 1000, reason: 'client closed' });
    }

    // --- connection -------------------------------------------------------------------

    _connect() {
      if (this._closed) return;
      var gen = ++this._gen;
      var self = this;
      this._setState('connecting');
      var ws;
      try {
        ws = new this._WS(this.url);
      } catch (err) {
        this._report(err);
        this._disconnected(gen, 0, String(err && err.message || err));
        return;
      }
      this._ws = ws;
      this._armHeartbeat(gen);
      ws.onopen = function () {
        if (gen !== self._gen) return;
        var hello = { type: 'hello', channel: self.channel, since: self._seq, client: self.client, batch: true };
        self._helloSince = self._seq;
        self._connMax = self._seq; // highest seq this socket has carried (the server's "sent")
        self._send(hello);
      };
      ws.onmessage = function (m) {
        if (gen !== self._gen) return;
        self._armHeartbeat(gen);
        var msg;
        try { msg = JSON.parse(m.data); } catch (err) {
          self._report(new Error('IdemStream: frame is not JSON'));
          return;
        }
        self._queue.push({ gen: gen, msg: msg });
        self._pump();
      };
      ws.onerror = function () { /* a close event follows */ };
      ws.onclose = function (ev) {
        if (gen !== self._gen) return;
        if (ev && ev.code === 4409) {
          var err = new Error('IdemStream: events after seq ' + self._seq + ' were trimmed: ' + (ev.reason || ''));
          err.code = 'trimmed';
          self._report(err);
        }
        self._disconnected(gen, ev && ev.code, ev && ev.reason);
      };
    }

    _closeSocket(code, reason) {
      var ws = this._ws;
      this._ws = null;
      if (!ws) return;
      ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
      try { ws.close(code, reason); } catch (e) { /* already closing */ }
    }

    // _drop closes the current socket of generation gen on the client's initiative.
    _drop(gen, code, reason) {
      if (gen !== this._gen || this._closed) return;
      this._closeSocket(code, reason);
      this._disconnected(gen, code, reason);
    }

    _disconnected(gen, code, reason) {
      if (gen !== this._gen || this._closed) return;
      this._gen++;
      this._ws && this._closeSocket(1000, '');
      clearTimeout(this._hbTimer); this._hbTimer = null;
      this._queue = [];
      this._setState('closed', { code: code, reason: reason || '' });
      var cap = Math.min(this.maxBackoff, this.minBackoff * Math.pow(2, Math.min(this._attempt + 1, 30)));
      this._attempt++;
      var delay = this.minBackoff + Math.random() * Math.max(0, cap - this.minBackoff);
      var self = this;
      this._retryTimer = setTimeout(function () {
        self._retryTimer = null;
        if (self._closed) return;
        self.reconnects++;
        self._connect();
      }, delay);
    }

    _armHeartbeat(gen) {
      clearTimeout(this._hbTimer);
      var self = this;
      this._hbTimer = setTimeout(function () {
        self._hbTimer = null;
        self._drop(gen, 4000, 'heartbeat timeout');
      }, this.heartbeatTimeout);
    }

    _send(obj) {
      var ws = this._ws;
      if (!ws || ws.readyState !== 1) return false;
      try { ws.send(JSON.stringify(obj)); return true; } catch (e) { return false; }
    }

    _setState(state, info) {
      if (state === this._state && state !== 'open') return;
      this._state = state;
      if (this._onState) {
        try { this._onState(state, info || {}); } catch (err) { this._report(err); }
      }
    }

    _report(err) {
      if (this._onError) {
        try { this._onError(err); } catch (e) { /* nothing to do */ }
      }
    }

    // --- frames -------------------------------------------------------------------------

    async _pump() {
      if (this._pumping) return;
      this._pumping = true;
      try {
        while (this._queue.length && !this._closed) {
          var item = this._queue.shift();
          if (item.gen !== this._gen) continue;
          try {
            await this._handle(item.msg);
          } catch (err) {
            this._report(err);
            this._drop(item.gen, 4000, 'catch-up failed');
          }
        }
      } finally {
        this._pumping = false;
      }
    }

    async _handle(msg) {
      switch (msg && msg.type) {
        case 'ready':
          this._attempt = 0;
          if (this._helloSince > this._acked) this._acked = this._helloSince;
          this._setState('open', { head: msg.head });
          return;
        case 'event':
        case 'events': {
          var events = msg.type === 'event' ? [msg.event] : (Array.isArray(msg.events) ? msg.events : []);
          for (var i = 0; i < events.length && !this._closed; i++) {
            var evt = events[i];
            if (evt && evt.seq > this._connMax) this._connMax = evt.seq;
            await this._onEventFrame(evt);
          }
          if (Math.min(this._seq, this._connMax) > this._acked) this._scheduleAck();
          return;
        }
        case 'error': {
          var err = new Error('IdemStream: server error ' + msg.code + ': ' + (msg.message || ''));
          err.code = msg.code;
          this._report(err);
          return;
        }
        default:
          return; // heartbeat and anything unknown: the heartbeat timer is already re-armed
      }
    }

    async _onEventFrame(evt) {
      if (!evt || typeof evt.seq !== 'number') return;
      if (evt.seq <= this._seq) return; // already delivered
      if (evt.seq > this._seq + 1) {
        await this._catchUp(evt.seq - 1);
        if (this._closed || evt.seq <= this._seq) return;
      }
      this._deliver(evt);
    }

    // _catchUp fetches events over REST until lastSeq >= target.
    async _catchUp(target) {
      while (this._seq < target && !this._closed) {
        var u = this.baseUrl + '/events?channel=' + encodeURIComponent(this.channel) + '&since=' + this._seq;
        var body = await this._getJSON(u);
        var events = (body && body.events) || [];
        var progressed = false;
        for (var i = 0; i < events.length && !this._closed; i++) {
          var e = events[i];
          if (!e || typeof e.seq !== 'number' || e.seq <= this._seq) continue;
          if (e.seq !== this._seq + 1) {
            throw new Error('IdemStream: catch-up got seq ' + e.seq + ' after ' + this._seq);
          }
          this._deliver(e);
          progressed = true;
        }
        if (!progressed && !this._closed) {
          throw new Error('IdemStream: catch-up stalled at seq ' + this._seq + ' (want ' + target + ')');
        }
      }
    }

    async _getJSON(url) {
      if (!this._fetch) throw new Error('IdemStream: no fetch implementation (pass option "fetch")');
      var ctl = typeof AbortController === 'function' ? new AbortController() : null;
      var timer = ctl ? setTimeout(function () { ctl.abort(); }, this.heartbeatTimeout) : null;
      try {
        var res = await this._fetch(url, { headers: { Accept: 'application/json' }, signal: ctl ? ctl.signal : undefined });
        var text = await res.text();
        if (!res.ok) {
          var detail = text;
          try { var p = JSON.parse(text); detail = p.detail || p.title || text; } catch (e) { /* not JSON */ }
          var err = new Error('IdemStream: GET ' + url + ': ' + res.status + ' ' + detail);
          err.status = res.status;
          if (res.status === 410) err.code = 'trimmed';
          throw err;
        }
        return JSON.parse(text);
      } finally {
        clearTimeout(timer);
      }
    }

    _deliver(evt) {
      this._seq = evt.seq;
      var hint = evt.data === undefined || evt.data === null;
      var fn = hint && this._onHint ? this._onHint : this._onEvent;
      try { fn(evt); } catch (err) { this._report(err); }
      this._unacked++;
      this._scheduleAck();
    }

    // --- acks ---------------------------------------------------------------------------

    _scheduleAck() {
      if (this._unacked >= 50) { this._flushAck(); return; }
      if (this._ackTimer || this._closed) return;
      var self = this;
      this._ackTimer = setTimeout(function () { self._ackTimer = null; self._flushAck(); }, 100);
    }

    // _flushAck acks lastSeq, but never more than this socket has carried: the server
    // refuses (bad_ack) an ack of events it did not send on this connection, such as
    // events fetched over REST that the socket has not reached yet.
    _flushAck() {
      clearTimeout(this._ackTimer); this._ackTimer = null;
      var seq = Math.min(this._seq, this._connMax);
      if (seq <= this._acked || this._state !== 'open') return;
      if (this._send({ type: 'ack', seq: seq })) {
        this._acked = seq;
        this._unacked = 0;
      }
    }
  }

  if (typeof window !== 'undefined') window.IdemStream = IdemStream;
  if (typeof module === 'object' && module && module.exports) module.exports = IdemStream;
})();
