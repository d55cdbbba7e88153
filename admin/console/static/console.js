// idem console: one page over the admin API (api/ next to this page).
//
// Everything the API returns may come from an attacker (payloads, reasons, key ids),
// so this file never parses a string as HTML: nodes are built with createElement and
// filled with textContent only. The Content-Security-Policy enforces it too
// (require-trusted-types-for 'script' makes every HTML-parsing sink throw).
'use strict';

(function () {
  const TOKEN_KEY = 'idem-admin-token';
  const ACTOR_KEY = 'idem-admin-actor';
  const SCOPE_KEY = 'idem-admin-scope';
  const METRICS_EVERY = 2000; // ms between GET api/metrics
  const TABLES_EVERY = 15000; // ms between table refreshes
  const WINDOW = 10 * 60 * 1000; // ms of samples kept for the charts
  const SVG = 'http://www.w3.org/2000/svg';

  // State visible to tests and to curious operators (no secrets: not the token).
  const state = {
    ready: false, access: '', areas: {}, samples: [], polls: 0, refreshes: 0,
    actions: [], errors: [], violations: [],
  };
  window.idemConsole = state;
  document.addEventListener('securitypolicyviolation', function (e) {
    state.violations.push(e.violatedDirective + ' ' + (e.blockedURI || ''));
  });

  const $ = function (id) { return document.getElementById(id); };

  // el builds an element: el('td', {className: 'x'}, 'text', node, ...). Strings
  // become text nodes, never markup.
  function el(tag, props) {
    const n = document.createElement(tag);
    if (props) {
      for (const k of Object.keys(props)) {
        if (k === 'dataset') Object.assign(n.dataset, props.dataset);
        else if (k === 'title' || k === 'className' || k === 'type' || k === 'disabled' || k === 'checked') n[k] = props[k];
        else n.setAttribute(k, props[k]);
      }
    }
    for (let i = 2; i < arguments.length; i++) {
      const c = arguments[i];
      if (c === null || c === undefined) continue;
      n.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
    }
    return n;
  }

  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); }

  // ---- the API ----

  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let actor = sessionStorage.getItem(ACTOR_KEY) || '';

  class APIError extends Error {
    constructor(status, problem, fallback) {
      super((problem && problem.detail) || fallback);
      this.status = status;
      this.problem = problem;
    }
  }

  async function api(method, path, body) {
    const headers = { 'Accept': 'application/json' };
    if (token) headers['Authorization'] = 'Bearer ' + token;
    const init = { method: method, headers: headers, credentials: 'omit', cache: 'no-store', redirect: 'error' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      if (actor) headers['X-Idem-Actor'] = actor;
      init.body = JSON.stringify(body);
    }
    const res = await fetch('api/' + path, init);
    let data = null;
    try { data = await res.json(); } catch (e) { /* not JSON: the status says it */ }
    if (!res.ok) {
      const err = new APIError(res.status, data, res.status + ' ' + res.statusText);
      if (res.status === 401) signOut(token ? 'The token was refused: ' + err.message : '');
      throw err;
    }
    return data;
  }

  function q(params) {
    const u = new URLSearchParams();
    for (const k of Object.keys(params)) if (params[k] !== '' && params[k] !== undefined) u.set(k, params[k]);
    const s = u.toString();
    return s ? '?' + s : '';
  }

  // ---- sign in and out ----

  const timers = { metrics: 0, tables: 0 };
  let session = 0; // one per sign-in: a loop of an earlier one stops
  let keysShown = null; // {store, scope} of the keys table, reloaded with the others

  function signOut(why) {
    token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    clearTimeout(timers.metrics);
    clearTimeout(timers.tables);
    state.ready = false;
    session++;
    // What the previous token could see goes with it.
    for (const tb of document.querySelectorAll('#main tbody')) clear(tb);
    for (const id of ['key-record', 'outbox-status', 'charts', 'metrics-sources', 'log', 'keys-more']) clear($(id));
    state.samples = [];
    state.actions = [];
    keysShown = null;
    $('main').hidden = true;
    $('refresh').hidden = $('signout').hidden = $('access').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = why || '';
    $('token').value = '';
    $('actor').value = actor;
    $('token').focus();
  }

  $('login-form').addEventListener('submit', function (e) {
    e.preventDefault();
    token = $('token').value.trim();
    actor = $('actor').value.trim();
    $('token').value = '';
    sessionStorage.setItem(TOKEN_KEY, token);
    if (actor) sessionStorage.setItem(ACTOR_KEY, actor); else sessionStorage.removeItem(ACTOR_KEY);
    start();
  });
  $('signout').addEventListener('click', function () { signOut('Token forgotten.'); });
  $('refresh').addEventListener('click', function () { refreshTables(); });

  async function start() {
    let idx;
    try {
      idx = await api('GET', '');
    } catch (e) {
      if (e.status !== 401) signOut('The API did not answer: ' + e.message);
      return;
    }
    state.access = idx.access;
    state.areas = idx.areas || {};
    $('login').hidden = true;
    $('main').hidden = false;
    $('refresh').hidden = false;
    $('signout').hidden = !token;
    const badge = $('access');
    badge.hidden = false;
    badge.textContent = { full: 'full access', read: 'read only', none: 'no token (loopback)' }[idx.access] || idx.access;
    badge.className = 'badge ' + (idx.access === 'read' ? 'read' : 'full');
    for (const sec of document.querySelectorAll('section[data-area]')) {
      const on = !!state.areas[sec.dataset.area];
      sec.classList.toggle('off', !on);
      const note = sec.querySelector('.note');
      note.hidden = on;
      note.textContent = on ? '' : 'Not configured on this server.';
    }
    buildCharts();
    await section('keys', loadStores).catch(function () { /* a 401 has signed out */ });
    state.ready = true;
    runAudit().catch(function () { /* a 401 has signed out */ });
    session++;
    pollMetrics(session);
    refreshLoop(session);
  }

  function banner(msg) {
    const b = $('banner');
    b.hidden = !msg;
    b.textContent = msg || '';
  }

  function logAction(text, ok) {
    state.actions.push({ text: text, ok: ok });
    const li = el('li', { className: ok ? 'ok' : 'error' }, new Date().toLocaleTimeString() + '  ' + text);
    $('log').prepend(li);
  }

  // ---- formatting ----

  function ago(iso) {
    if (!iso) return '';
    const t = Date.parse(iso);
    if (isNaN(t)) return String(iso);
    let s = Math.round((Date.now() - t) / 1000);
    const future = s < 0;
    s = Math.abs(s);
    const txt = s < 90 ? s + 's' : s < 5400 ? Math.round(s / 60) + 'm' : s < 129600 ? Math.round(s / 3600) + 'h' : Math.round(s / 86400) + 'd';
    return future ? 'in ' + txt : txt + ' ago';
  }

  // resultNode shows a key's result: a stored HTTP response (r.http) as its status,
  // content type and body preview, anything else as its raw preview.
  function resultNode(r) {
    const h = r.http;
    if (!h) return previewNode(r.result);
    const status = el('span', { className: 'http-status s' + String(h.status).charAt(0) }, String(h.status));
    const type = el('span', { className: 'http-type muted' }, h.content_type || '(no content type)');
    const body = h.not_stored ? el('span', { className: 'muted' }, 'not stored: ' + h.body.size + ' bytes, a retry is answered 409')
      : bodyNode(h.body);
    return el('span', { className: 'http-result' }, status, ' ', type, ' ', body);
  }

  // bodyNode shows a BodyPreview {size, encoding, preview, truncated} as text.
  function bodyNode(b) {
    if (!b || !b.size) return el('code', { className: 'preview' }, '(empty)');
    const text = (b.encoding === 'base64' ? 'base64:' : '') + b.preview + (b.truncated ? '…' : '');
    return el('code', { className: 'preview body' + (b.encoding === 'base64' ? ' hex' : ''), title: b.size + ' bytes, ' + b.encoding }, text);
  }

  function timeCell(iso) {
    return el('td', { title: iso || '', className: 'time' }, ago(iso));
  }

  // previewNode shows a Preview {size, encoding, preview, truncated} as text.
  function previewNode(p) {
    if (!p) return el('span', { className: 'muted' }, '');
    const text = p.preview + (p.truncated ? '…' : '');
    return el('code', { className: 'preview' + (p.encoding === 'hex' ? ' hex' : ''), title: p.size + ' bytes, ' + p.encoding },
      text === '' ? '(empty)' : text);
  }

  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) return '—';
    const a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e4) return String(v);
    if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a === 0) return '0';
    return v.toFixed(2);
  }

  // ---- charts ----

  // Each chart reads one metric of GET api/metrics: a counter as a rate per second
  // between two polls, a gauge as is, a histogram as the mean of the interval's
  // observations.
  // A chart whose metric is absent reads its alt, if exported: the gateway (idem
  // serve) exports no store metrics (their scope label is one value per caller),
  // so claims, duplicates and replays are read there from its requests' outcomes.
  const VIA_GATEWAY = 'idem_http_requests_total';
  const CHARTS = [
    { id: 'claims', title: 'claims /s', metric: 'idem_claims_total', kind: 'rate',
      alt: { metric: VIA_GATEWAY, outcomes: ['executed', 'replayed', 'conflict', 'mismatch', 'error'] } },
    { id: 'duplicates', title: 'duplicates suppressed /s', metric: 'idem_duplicates_total', kind: 'rate',
      alt: { metric: VIA_GATEWAY, outcomes: ['replayed', 'conflict'] } },
    { id: 'replays', title: 'replays /s', metric: 'idem_claims_total', outcome: 'replayed', kind: 'rate',
      alt: { metric: VIA_GATEWAY, outcomes: ['replayed'] } },
    { id: 'conflicts', title: '409 in progress /s', metric: 'idem_http_requests_total', outcome: 'conflict', kind: 'rate' },
    { id: 'deadletters', title: 'dead letters /s', metric: 'idem_inbox_dead_letters_total', kind: 'rate' },
    { id: 'backlog', title: 'outbox backlog', metric: 'idem_outbox_unpublished', kind: 'gauge' },
    { id: 'oldest', title: 'outbox oldest (s)', metric: 'idem_outbox_oldest_age_seconds', kind: 'gauge' },
    { id: 'parked', title: 'outbox parked', metric: 'idem_outbox_parked', kind: 'gauge' },
    { id: 'relay', title: 'relay published /s', metric: 'idem_relay_published_total', kind: 'rate' },
    { id: 'relaylag', title: 'relay lag, mean (s)', metric: 'idem_relay_lag_seconds', kind: 'mean' },
  ];

  function buildCharts() {
    const box = $('charts');
    clear(box);
    if (!state.areas.metrics) {
      $('rates-note').textContent = 'not configured on this server (admin.Config.Gatherer)';
      return;
    }
    $('rates-note').textContent = 'since the page opened, up to ' + WINDOW / 60000 + ' minutes, every ' + METRICS_EVERY / 1000 + 's';
    for (const c of CHARTS) {
      const svg = document.createElementNS(SVG, 'svg');
      svg.setAttribute('viewBox', '0 0 200 40');
      svg.setAttribute('preserveAspectRatio', 'none');
      svg.setAttribute('class', 'spark');
      svg.setAttribute('role', 'img');
      svg.setAttribute('aria-label', c.title);
      const area = document.createElementNS(SVG, 'path');
      area.setAttribute('class', 'area');
      const line = document.createElementNS(SVG, 'path');
      line.setAttribute('class', 'line');
      svg.append(area, line);
      const card = el('div', { className: 'chart', dataset: { chart: c.id } },
        el('div', { className: 'chart-head' }, el('span', { className: 'chart-title' }, c.title),
          el('span', { className: 'chart-value' }, '—')),
        svg, el('div', { className: 'chart-foot muted' }, ''));
      box.appendChild(card);
      c.card = card; c.line = line; c.area = area;
    }
  }

  // sourceHint says which process exports a metric and how idem admin reads it.
  function sourceHint(metric) {
    if (/^idem_(relay|outbox)_/.test(metric)) {
      return "start the relay with --listen (its /metrics) and add --metrics-from http://127.0.0.1:9464/metrics (the relay's --listen)";
    }
    if (/^idem_http_/.test(metric)) {
      return "start the gateway with --admin-listen and add --metrics-from http://127.0.0.1:9465/metrics (idem serve's --admin-listen)";
    }
    if (/^idem_inbox_/.test(metric)) return "add --metrics-from with the /metrics of the service that runs the inbox";
    return "add --metrics-from with the /metrics of the process that exports it";
  }

  // absentText says why a chart has no figure: no source exports its metric (and
  // which sources are down), or this server does not.
  function absentText(c, sources) {
    if (!sources) return c.metric + (c.alt ? ' (or ' + c.alt.metric + ')' : '') + ' not exported by this server';
    const down = sources.filter(function (s) { return !s.up; });
    let t = 'no source exports ' + c.metric + (c.alt ? ' or ' + c.alt.metric : '') + ': ' + sourceHint(c.alt ? c.alt.metric : c.metric);
    if (down.length) t += '; down: ' + down.map(function (s) { return s.url + ' (' + s.error + ')'; }).join(', ');
    return t;
  }

  // showSources lists the metrics sources of the last summary, up or down.
  function showSources(sources) {
    const ul = $('metrics-sources');
    clear(ul);
    ul.hidden = !sources;
    if (!sources) return;
    if (!sources.length) {
      ul.appendChild(el('li', { className: 'muted' }, "no metrics sources: this server's own metrics only (idem admin --metrics-from URL reads a process's /metrics)"));
    }
    for (const s of sources) {
      ul.appendChild(el('li', { className: s.up ? 'up' : 'down' }, s.up
        ? 'source ' + s.url + ': up, ' + s.families + ' idem_* metrics'
        : 'source ' + s.url + ': DOWN: ' + s.error));
    }
  }

  // spec is what a chart reads in sample: its metric, else its alt, else null.
  function spec(sample, c) {
    if (sample.metrics[c.metric] !== undefined) return c;
    if (c.alt && sample.metrics[c.alt.metric] !== undefined) return c.alt;
    return null;
  }

  // metricValue reads sp (a chart or its alt) in a sample: the metric's value, or
  // the sum of its outcomes'.
  function metricValue(sample, sp) {
    const m = sample.metrics[sp.metric];
    if (!m) return undefined;
    if (sp.outcome) return (m.by_outcome && m.by_outcome[sp.outcome]) || 0;
    if (sp.outcomes) return sp.outcomes.reduce(function (a, o) { return a + ((m.by_outcome && m.by_outcome[o]) || 0); }, 0);
    return m.value;
  }

  // series returns the chart's points [{t, v}] over the samples kept, read as sp.
  function series(c, sp) {
    const out = [];
    const s = state.samples;
    for (let i = 0; i < s.length; i++) {
      const cur = s[i];
      const v = metricValue(cur, sp);
      if (v === undefined) continue;
      if (c.kind === 'gauge') { out.push({ t: cur.t, v: v }); continue; }
      if (i === 0) continue;
      const prev = s[i - 1];
      const pv = metricValue(prev, sp);
      const dt = (cur.t - prev.t) / 1000;
      if (pv === undefined || dt <= 0) continue;
      if (c.kind === 'rate') {
        const d = v >= pv ? v - pv : v; // a reset starts the counter again from 0
        out.push({ t: cur.t, v: d / dt });
      } else { // mean of a histogram's observations in the interval
        const m = cur.metrics[sp.metric], pm = prev.metrics[sp.metric];
        const dn = v - pv, ds = (m.sum || 0) - (pm.sum || 0);
        out.push({ t: cur.t, v: dn > 0 ? ds / dn : 0 });
      }
    }
    return out;
  }

  function drawCharts() {
    if (!state.samples.length) return;
    const last = state.samples[state.samples.length - 1];
    // The x axis spans the samples kept (at most WINDOW), so a fresh page's few
    // points fill the chart too.
    const t1 = last.t, t0 = state.samples[0].t, span = Math.max(1, t1 - t0);
    for (const c of CHARTS) {
      if (!c.card) continue;
      const sp = spec(last, c);
      const exported = sp !== null;
      const pts = exported ? series(c, sp) : [];
      c.card.classList.toggle('absent', !exported);
      const value = c.card.querySelector('.chart-value');
      const foot = c.card.querySelector('.chart-foot');
      const from = exported && last.metrics[sp.metric].from;
      foot.title = (sp && sp !== c ? 'via ' + sp.metric + ' (' + sp.outcomes.join(', ') + ')' : '') +
        (from ? (sp !== c ? '; ' : '') + 'from ' + from.join(', ') : '');
      if (!exported) {
        value.textContent = '—';
        foot.textContent = absentText(c, last.sources);
        c.line.setAttribute('d', ''); c.area.setAttribute('d', '');
        continue;
      }
      const top = Math.max(0, ...pts.map(function (p) { return p.v; }));
      const max = Math.max(1e-9, top);
      value.textContent = pts.length ? fmt(pts[pts.length - 1].v) : '…';
      foot.textContent = (pts.length ? 'max ' + fmt(top) : 'waiting for a second sample') + (sp !== c ? ' · via the gateway' : '');
      let d = '';
      for (const p of pts) {
        const x = ((p.t - t0) / span) * 200;
        const y = 38 - (p.v / max) * 36;
        d += (d ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
      }
      c.line.setAttribute('d', d);
      if (pts.length) {
        const x0 = (((pts[0].t - t0) / span) * 200).toFixed(1);
        const x1 = (((pts[pts.length - 1].t - t0) / span) * 200).toFixed(1);
        c.area.setAttribute('d', d + 'L' + x1 + ' 40L' + x0 + ' 40Z');
      } else {
        c.area.setAttribute('d', '');
      }
    }
  }

  async function pollMetrics(s) {
    if (s !== session) return;
    if (state.areas.metrics) {
      try {
        const m = await api('GET', 'metrics');
        if (s !== session) return;
        const t = Date.parse(m.time);
        state.samples.push({ t: isNaN(t) ? Date.now() : t, metrics: m.metrics || {}, sources: m.sources });
        showSources(m.sources);
        while (state.samples.length > 2 && state.samples[0].t < t - WINDOW) state.samples.shift();
        state.polls++;
        drawCharts();
        $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
      } catch (e) {
        state.errors.push('metrics: ' + e.message);
        if (state.errors.length > 50) state.errors.shift();
        if (e.status === 401) return;
      }
    }
    if (s === session) timers.metrics = setTimeout(pollMetrics, METRICS_EVERY, s);
  }

  // ---- tables ----

  const canWrite = function () { return state.access === 'full' || state.access === 'none'; };

  // actionButton makes a row's button; blocked, if set, says why it is disabled.
  function actionButton(label, action, onClick, danger, blocked) {
    const b = el('button', { type: 'button', className: danger ? 'danger small' : 'small', dataset: { action: action } }, label);
    if (!canWrite()) blocked = 'the read-only token cannot make changes';
    if (blocked) {
      b.disabled = true;
      b.title = blocked;
    }
    b.addEventListener('click', onClick);
    return b;
  }

  // A row another service wrote that the API could not decode whole comes with a
  // decode_error: it is listed like the others, marked, with what is wrong with it.
  function decodeNote(r) {
    return r.decode_error ? el('div', { className: 'decode-error' }, 'cannot be decoded: ' + r.decode_error) : null;
  }

  function undecodable(r, what) {
    return r.decode_error ? 'its row cannot be decoded: correct it, or ' + what : '';
  }

  function fill(tableId, rows, cells, empty) {
    if (!state.ready) return; // an answer to a token signed out since
    const tbody = $(tableId).tBodies[0];
    clear(tbody);
    if (!rows.length) {
      const n = $(tableId).tHead.rows[0].cells.length;
      tbody.appendChild(el('tr', { className: 'empty' }, el('td', { colspan: n }, empty)));
      return;
    }
    for (const r of rows) {
      const tr = el('tr', { dataset: { id: String(r.id !== undefined ? r.id : r.key) }, className: r.decode_error ? 'undecodable' : '' });
      for (const c of cells(r)) tr.appendChild(c instanceof Node && c.tagName === 'TD' ? c : el('td', null, c));
      tbody.appendChild(tr);
    }
  }

  function count(id, n, more) {
    $(id).textContent = n ? String(n) + (more ? '+' : '') : '';
  }

  async function section(area, fn) {
    if (!state.areas[area]) return;
    const note = document.querySelector('section[data-area="' + area + '"] .note');
    try {
      await fn();
      note.hidden = true;
    } catch (e) {
      if (e.status === 401) throw e;
      note.hidden = false;
      note.className = 'note error';
      note.textContent = 'Could not load: ' + e.message;
    }
  }

  async function loadDeadLetters() {
    const page = await api('GET', 'deadletters' + q({ limit: 100 }));
    const dls = page.deadletters || [];
    count('deadletters-count', dls.length, page.next);
    fill('deadletters', dls, function (d) {
      return [String(d.id), d.consumer, d.topic, d.kind, el('td', { className: 'reason' }, d.reason, decodeNote(d)), String(d.attempts),
        timeCell(d.dead_at), el('td', null, previewNode(d.payload)),
        el('td', { className: 'actions' },
          actionButton('Replay', 'replay', function () { replayDeadLetter(d); }, false, undecodable(d, 'discard it')),
          actionButton('Discard', 'discard', function () { discardDeadLetter(d); }, true))];
    }, 'No dead letters.');
  }

  async function loadOutbox() {
    const st = await api('GET', 'outbox');
    if (!state.ready) return;
    const box = $('outbox-status');
    clear(box);
    const parts = st.partitions || [];
    const backlog = parts.reduce(function (a, p) { return a + p.backlog; }, 0);
    const oldest = parts.reduce(function (a, p) { return Math.max(a, p.oldest_age_seconds); }, 0);
    box.append(
      el('span', null, el('b', null, fmt(backlog)), ' unpublished'),
      el('span', null, el('b', null, fmt(oldest)), 's oldest'),
      el('span', null, el('b', null, String(st.parked)), ' parked'));
    if (st.discarded) box.append(el('span', { className: 'muted' }, st.discarded + ' discarded'));
    for (const r of st.relays || []) {
      // A stale relay stopped reporting: it died, hangs or cannot reach the database.
      const line = el('span', { className: r.stale ? 'relay stale' : 'relay', title: r.last_error || r.last_round || '' },
        'relay ', el('b', null, r.instance), ': ' + r.published + ' published, last round ' + ago(r.last_round));
      if (r.stale) line.append(' ', el('b', { className: 'stale-mark' }, 'STALE'));
      box.append(line);
    }
    for (const p of parts) {
      if (p.backlog) box.append(el('span', { className: 'muted' }, p.topic + (p.partition ? '/' + p.partition : '') + ': ' + p.backlog));
    }
    const page = await api('GET', 'outbox/parked' + q({ limit: 100 }));
    // The list holds the discarded messages too (with discarded_at): they need no
    // action, and the status line counts them.
    const msgs = (page.messages || []).filter(function (m) { return !m.discarded_at; });
    count('parked-count', msgs.length, page.next);
    fill('parked', msgs, function (m) {
      return [String(m.id), m.topic, m.message_id, String(m.attempts), el('td', { className: 'reason' }, m.last_error, decodeNote(m)),
        timeCell(m.parked_at), el('td', null, previewNode(m.payload)),
        el('td', { className: 'actions' },
          actionButton('Retry', 'retry', function () { retryParked(m); }, false, undecodable(m, 'discard it')),
          actionButton('Discard', 'discard', function () { discardParked(m); }, true))];
    }, 'No parked messages.');
  }

  // The database as the queue: its topics by state (the oldest ready message's age
  // says whether consumers keep up), then the unfinished messages, oldest first,
  // each with a Cancel.
  async function loadQueue() {
    const st = await api('GET', 'queue');
    const topics = st.topics || [];
    fill('queue-topics', topics.map(function (t) { return Object.assign({ key: t.topic }, t); }), function (t) {
      const old = el('td', { className: t.oldest_ready_age_seconds > 300 ? 'stale' : '' }, fmt(t.oldest_ready_age_seconds) + 's');
      return [t.topic, String(t.ready), String(t.running), String(t.retrying), String(t.scheduled), old];
    }, 'No unfinished messages.');
    const page = await api('GET', 'queue/messages' + q({ limit: 100 }));
    const msgs = page.messages || [];
    count('queue-count', msgs.length, page.next);
    fill('queue-messages', msgs, function (m) {
      return [String(m.id), m.topic, m.message_id, m.ordering_key || '', m.state, String(m.attempts), timeCell(m.available_at),
        m.leased_by || '', el('td', { className: 'reason' }, m.last_error || ''),
        el('td', { className: 'actions' }, actionButton('Cancel', 'cancel', function () { cancelQueued(m); }, true))];
    }, 'No unfinished messages.');
  }

  function cancelQueued(m) {
    return itemActionBody('cancel queue message ' + m.message_id,
      'It will not run; a consumer running it cannot commit its effect.', 'queue/cancel',
      { topic: m.topic, id: m.message_id }, 'cancelled');
  }

  // The sagas needing a person: failed ones, those the orchestrators parked (they
  // cannot run them: the reason says why), and those compensating.
  async function loadSagas() {
    const lists = await Promise.all(['failed', 'parked', 'compensating'].map(function (s) { return api('GET', 'sagas' + q({ state: s, limit: 100 })); }));
    const seen = {};
    const sagas = [].concat(lists[0].sagas || [], lists[1].sagas || [], lists[2].sagas || []).filter(function (s) {
      return seen[s.id] ? false : (seen[s.id] = true); // a parked compensating saga is in two lists
    });
    count('sagas-count', sagas.length, lists[0].next || lists[1].next || lists[2].next);
    fill('sagas', sagas, function (s) {
      return [s.id, s.name, el('td', { className: 'state ' + s.state }, s.state,
        s.parked ? el('span', { className: 'parked-mark', title: 'set aside: no orchestrator runs it until it is corrected and retried, or resolved' }, ' parked') : null),
        String(s.step), String(s.attempts),
        el('td', { className: 'reason' }, s.reason || '', decodeNote(s)), timeCell(s.updated_at),
        el('td', { className: 'actions' },
          actionButton('Retry', 'retry', function () { retrySaga(s); }, false, undecodable(s, 'resolve it')),
          actionButton('Resolve', 'resolve', function () { resolveSaga(s); }, true))];
    }, 'No failed, parked or compensating sagas.');
  }

  async function loadEffects() {
    const page = await api('GET', 'effects' + q({ limit: 100 }));
    const effs = page.effects || [];
    count('effects-count', effs.length, page.next);
    fill('effects', effs, function (f) {
      // One key has an effect per step (a saga's do:<step> and undo:<step>).
      return [el('td', null, f.key, f.step ? el('span', { className: 'muted step' }, ' ' + f.step) : null),
        el('td', { className: 'state ' + f.state }, f.state), String(f.attempts), el('td', { className: 'reason' }, f.error || '', decodeNote(f)),
        timeCell(f.lease_until), timeCell(f.updated_at)];
    }, 'No stuck or failed effects.');
  }

  async function loadStream() {
    const st = await api('GET', 'stream');
    const clients = st.clients || [];
    fill('stream', clients.map(function (c) { return Object.assign({ key: c.id }, c); }), function (c) {
      return [c.id, c.channel, String(c.acked_seq), String(c.lag), timeCell(c.connected_at)];
    }, (st.channels || []).length + ' channels, no clients connected.');
  }

  // ---- audit ----

  // An audit reads a whole window of the outbox and every consumer's keys: it runs
  // when asked (Audit now), not at each refresh. Repair missing republishes what
  // the last audit found missing, with a reason, as the parked messages' retry.
  function nanos(ns) {
    if (!ns) return '0';
    if (ns < 1e6) return (ns / 1e3).toFixed(0) + 'µs';
    if (ns < 1e9) return (ns / 1e6).toFixed(1) + 'ms';
    return (ns / 1e9).toFixed(2) + 's';
  }

  function showAudit(rep) {
    if (!state.ready) return;
    const rows = rep.rows || [];
    const missing = rows.reduce(function (a, r) { return a + r.missing; }, 0);
    count('audit-count', missing, false);
    $('audit-window').textContent = 'published ' + rep.from + ' .. ' + rep.to + ', grace ' + nanos(rep.grace_ns) + ', ' + rep.scanned + ' rows read' +
      (rep.truncated ? ' (stopped before the end of the window)' : '');
    fill('audit', rows.map(function (r) { return Object.assign({ key: r.topic + '\u0000' + r.consumer }, r); }), function (r) {
      return [r.topic, r.consumer, String(r.published), String(r.applied), String(r.dead_lettered),
        el('td', { className: r.missing ? 'state failed' : '', title: (r.missing_ids || []).join(', ') }, String(r.missing)),
        String(r.in_flight), nanos(r.latency && r.latency.p99_ns)];
    }, 'No consumer rows.');
    const notes = $('audit-notes');
    clear(notes);
    for (const r of rows) {
      if (r.missing_ids && r.missing_ids.length) notes.appendChild(el('li', null, 'missing at ' + r.consumer + ' (' + r.topic + '): ' + r.missing_ids.join(', ')));
    }
    for (const b of rep.blind || []) notes.appendChild(el('li', { className: 'muted' }, b.consumer + ': not audited: ' + b.reason));
    const acts = $('audit-actions');
    clear(acts);
    acts.appendChild(actionButton('Repair missing', 'repair', repairMissing, true, missing ? '' : 'nothing is missing'));
  }

  async function loadAuditRepairs() {
    const page = await api('GET', 'audit/repairs' + q({ limit: 20 }));
    fill('audit-repairs', page.repairs.map(function (r) { return Object.assign({ id: r.copy_id }, r); }), function (r) {
      return [String(r.copy_id), String(r.orig_id), r.msg_id, r.topic, (r.consumers || []).join(', '), timeCell(r.at)];
    }, 'No repairs recorded.');
  }

  async function runAudit() {
    await section('audit', async function () {
      showAudit(await api('GET', 'audit'));
      await loadAuditRepairs();
    });
  }

  async function repairMissing() {
    const a = await ask('Repair missing messages', 'Republish every message the audit finds missing, under its id: a consumer that did get it drops the copy by its key. Never one a consumer dead-lettered.');
    if (!a) return;
    await act('repair missing messages', async function () {
      const rep = await api('POST', 'audit/repair', { reason: a.reason });
      showAudit(rep);
      await loadAuditRepairs();
      return (rep.repaired || []).length + ' republished';
    });
  }

  $('audit-run').addEventListener('click', function () { runAudit(); });

  // ---- keys ----

  async function loadStores() {
    const st = await api('GET', 'stores');
    for (const id of ['keys-store', 'key-store']) {
      const sel = $(id);
      clear(sel);
      for (const name of st.stores || []) sel.appendChild(el('option', { value: name }, name));
    }
    const scope = sessionStorage.getItem(SCOPE_KEY) || '';
    $('keys-scope').value = scope;
    await loadScopes();
  }

  // loadScopes fills the scope picker with the store's scopes (GET /api/scopes,
  // first 1000). A store that cannot list them (501) or fails hides the picker:
  // the scope box still works.
  async function loadScopes() {
    const sel = $('keys-scopes'), label = $('keys-scopes-label');
    const store = $('keys-store').value;
    let page;
    try {
      page = await api('GET', 'scopes' + q({ store: store, limit: 1000 }));
    } catch (e) {
      if (e instanceof APIError && e.status === 401) throw e;
      clear(sel);
      label.hidden = true;
      return;
    }
    if ($('keys-store').value !== store) return; // another store was picked meanwhile
    clear(sel);
    const scopes = page.scopes || [];
    sel.appendChild(el('option', { value: '' }, scopes.length ? scopes.length + (page.next ? '+' : '') + ' scopes…' : 'no scopes'));
    for (const sc of scopes) sel.appendChild(el('option', { value: sc }, sc));
    if (page.next) sel.appendChild(el('option', { value: '', disabled: true }, 'more not shown (first 1000)'));
    label.hidden = false;
  }

  $('keys-store').addEventListener('change', function () { loadScopes().catch(function () { /* signed out */ }); });
  $('keys-scopes').addEventListener('change', function () {
    const sc = $('keys-scopes').value;
    if (!sc) return;
    $('keys-scope').value = sc;
    $('keys-form').requestSubmit();
  });

  async function loadKeys() {
    if (!keysShown) {
      fill('keys', [], null, 'Name a scope and press List.');
      return;
    }
    const page = await api('GET', 'keys' + q({ store: keysShown.store, scope: keysShown.scope, limit: 1000 }));
    let recs = page.records || [];
    const stuck = function (r) { return r.state === 'in_progress' && r.expired; };
    if ($('keys-stuck').checked) recs = recs.filter(stuck);
    $('keys-more').textContent = page.next ? 'First 1000 keys of the scope; stuck keys further on are not shown.' : '';
    fill('keys', recs.map(function (r) { return Object.assign({ key: r.id }, r); }), function (r) {
      const st = stuck(r) ? 'stuck' : r.state;
      return [el('td', { className: 'mono' }, r.id), el('td', { className: 'state ' + st }, st.replace('_', ' ')), r.token,
        timeCell(r.created_at), timeCell(r.expires_at), el('td', null, resultNode(r)),
        el('td', { className: 'actions' }, actionButton('Evict', 'evict', function () { evictKey(r); }, true))];
    }, $('keys-stuck').checked ? 'No stuck keys in this scope.' : 'No keys in this scope.');
  }

  $('keys-form').addEventListener('submit', function (e) {
    e.preventDefault();
    keysShown = { store: $('keys-store').value, scope: $('keys-scope').value };
    sessionStorage.setItem(SCOPE_KEY, keysShown.scope);
    section('keys', loadKeys);
  });
  $('keys-stuck').addEventListener('change', function () { if (keysShown) section('keys', loadKeys); });

  async function inspectKey(full) {
    const box = $('key-record');
    clear(box);
    for (const k of ['store', 'scope', 'id']) delete box.dataset[k];
    const store = $('key-store').value, scope = $('key-scope').value, id = $('key-id').value;
    let r;
    try {
      r = await api('GET', 'key' + q({ store: store, scope: scope, id: id, full: full ? '1' : '' }));
    } catch (e) {
      box.appendChild(el('p', { className: 'error' }, e.message));
      return;
    }
    const dl = el('dl', { className: 'record' });
    const row = function (k, v) { dl.append(el('dt', null, k), el('dd', null, v)); };
    row('store', r.store); row('scope', r.scope); row('id', r.id);
    row('state', r.state + (r.expired ? ' (expired: ' + (r.state === 'in_progress' ? 'lease passed' : 'retention passed') + ')' : ''));
    row('token', r.token); row('fingerprint', r.fingerprint || '(none)');
    row('created', r.created_at ? r.created_at + ' (' + ago(r.created_at) + ')' : '');
    row('expires', r.expires_at ? r.expires_at + ' (' + ago(r.expires_at) + ')' : '');
    if (r.http) {
      row('response', resultNode(r));
      const hs = el('ul', { className: 'http-headers' });
      for (const f of r.http.headers || []) {
        hs.appendChild(el('li', null, el('code', null, f.name + ': ' + f.value + (f.truncated ? '…' : ''))));
      }
      if (r.http.headers_truncated) hs.appendChild(el('li', { className: 'muted' }, (r.http.header_count - r.http.headers.length) + ' more not shown'));
      row('headers', hs.childElementCount ? hs : '(none)');
    }
    row('result', previewNode(r.result));
    box.appendChild(dl);
    Object.assign(box.dataset, { store: r.store, scope: r.scope, id: r.id });
    if (r.result && r.result.full !== undefined) {
      box.appendChild(el('pre', { className: 'full' }, decodeFull(r.result.full)));
    } else if (r.result && r.result.truncated && canWrite()) {
      const b = el('button', { type: 'button', className: 'small', dataset: { action: 'full' } }, 'Show the whole result (' + r.result.size + ' bytes)');
      b.addEventListener('click', function () { inspectKey(true); });
      box.appendChild(b);
    }
    const ev = actionButton('Evict', 'evict', function () { evictKey(r); }, true);
    box.appendChild(ev);
  }

  // decodeFull shows the bytes of a full result (base64 in JSON) as text when they
  // are UTF-8, else as hex.
  function decodeFull(b64) {
    const bin = atob(b64 || '');
    const bytes = Uint8Array.from(bin, function (ch) { return ch.charCodeAt(0); });
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    } catch (e) {
      return Array.from(bytes, function (b) { return b.toString(16).padStart(2, '0'); }).join('');
    }
  }

  $('key-form').addEventListener('submit', function (e) {
    e.preventDefault();
    inspectKey(false);
  });

  // ---- actions ----

  // ask opens the confirmation dialog and resolves to {reason, force}, or null when
  // the operator cancels.
  function ask(title, text, opts) {
    opts = opts || {};
    const dlg = $('confirm');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-label').textContent = opts.label || 'Reason';
    $('confirm-reason').value = '';
    $('confirm-force-row').hidden = !opts.force;
    $('confirm-force').checked = false;
    dlg.showModal();
    $('confirm-reason').focus();
    return new Promise(function (resolve) {
      const form = $('confirm-form');
      const done = function (v) {
        form.removeEventListener('submit', onSubmit);
        $('confirm-cancel').removeEventListener('click', onCancel);
        dlg.removeEventListener('cancel', onCancel);
        dlg.close();
        resolve(v);
      };
      const onSubmit = function (e) {
        e.preventDefault();
        const reason = $('confirm-reason').value.trim();
        if (!reason) { $('confirm-reason').focus(); return; }
        done({ reason: reason, force: $('confirm-force').checked });
      };
      const onCancel = function (e) { if (e) e.preventDefault(); done(null); };
      form.addEventListener('submit', onSubmit);
      $('confirm-cancel').addEventListener('click', onCancel);
      dlg.addEventListener('cancel', onCancel);
    });
  }

  // act runs one mutation, logs its outcome and refreshes the tables.
  async function act(what, fn) {
    let ok = false;
    try {
      const msg = await fn();
      logAction(what + ': ' + (msg || 'done'), true);
      ok = true;
    } catch (e) {
      logAction(what + ': ' + e.message, false);
    }
    await refreshTables();
    return ok;
  }

  async function replayDeadLetter(d) {
    const a = await ask('Replay dead letter ' + d.id, 'Put the message of ' + d.consumer + ' back to be processed.');
    if (!a) return;
    await act('replay dead letter ' + d.id, async function () {
      const r = await api('POST', 'deadletters/replay', { ids: [d.id], reason: a.reason });
      return (r.results || []).map(function (x) { return x.outcome + (x.detail ? ' (' + x.detail + ')' : ''); }).join(', ');
    });
  }

  // itemAction asks for the reason of an action on one item (what, as the log names
  // it), POSTs it to path as the body's field (reason, or note), and logs done.
  async function itemAction(what, text, path, done, field, opts) {
    const a = await ask(what.charAt(0).toUpperCase() + what.slice(1), text, opts);
    if (!a) return;
    const body = {};
    body[field || 'reason'] = a.reason;
    await act(what, function () {
      return api('POST', path, body).then(function () { return done; });
    });
  }

  // itemActionBody is itemAction for a route that names its item in the body.
  async function itemActionBody(what, text, path, fields, done) {
    const a = await ask(what.charAt(0).toUpperCase() + what.slice(1), text);
    if (!a) return;
    const body = Object.assign({ reason: a.reason }, fields);
    await act(what, function () {
      return api('POST', path, body).then(function () { return done; });
    });
  }

  function discardDeadLetter(d) {
    return itemAction('discard dead letter ' + d.id, 'Drop it for good: the message will not be processed.',
      'deadletters/' + encodeURIComponent(d.id) + '/discard', 'discarded');
  }

  function retryParked(m) {
    return itemAction('retry parked message ' + m.id, 'Hand it back to the relay to publish.',
      'outbox/parked/' + encodeURIComponent(m.id) + '/retry', 'retried');
  }

  function discardParked(m) {
    return itemAction('discard parked message ' + m.id, 'It will never be published.',
      'outbox/parked/' + encodeURIComponent(m.id) + '/discard', 'discarded');
  }

  function retrySaga(s) {
    return itemAction('retry saga ' + s.id, 'Run its failed step (or compensation) again.',
      'sagas/' + encodeURIComponent(s.id) + '/retry', 'retried');
  }

  function resolveSaga(s) {
    return itemAction('resolve saga ' + s.id, 'Mark it settled by hand.',
      'sagas/' + encodeURIComponent(s.id) + '/resolve', 'resolved', 'note', { label: 'What was done' });
  }

  async function evictKey(r) {
    const a = await ask('Evict key ' + r.scope + ' / ' + r.id,
      'Its record (' + r.state.replace('_', ' ') + ') is deleted and the key can be claimed again.', { force: true });
    if (!a) return;
    const ok = await act('evict key ' + r.scope + '/' + r.id, function () {
      return api('POST', 'keys/evict', { store: r.store, scope: r.scope, id: r.id, force: a.force, reason: a.reason })
        .then(function () { return 'evicted'; });
    });
    const shown = $('key-record').dataset;
    if (ok && shown.store === r.store && shown.scope === r.scope && shown.id === r.id) {
      clear($('key-record'));
      $('key-record').appendChild(el('p', { className: 'muted' }, 'Evicted.'));
    }
  }

  // ---- refresh ----

  // refreshTables reloads every table. A call while a refresh runs queues one more
  // (so a table reloaded after an action shows its outcome); calls while one is
  // queued join it.
  let chain = Promise.resolve();
  let queued = null;

  function refreshTables() {
    if (queued) return queued;
    queued = chain.then(async function () {
      queued = null;
      try {
        await Promise.all([
          section('deadletters', loadDeadLetters), section('outbox', loadOutbox), section('keys', loadKeys),
          section('sagas', loadSagas), section('effects', loadEffects), section('stream', loadStream),
          section('queue', loadQueue)]);
        banner('');
        state.refreshes++;
      } catch (e) {
        if (e.status !== 401) banner(e.message);
      }
    });
    chain = queued;
    return queued;
  }

  async function refreshLoop(s) {
    if (s !== session) return;
    await refreshTables();
    if (s === session) timers.tables = setTimeout(refreshLoop, TABLES_EVERY, s);
  }

  // Without a stored token, try once without one (an Insecure, loopback-only API);
  // a 401 shows the token form.
  start();
})();
