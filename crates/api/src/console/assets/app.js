// The httpdns admin console: one page over the admin API (docs/console.md). No framework and
// nothing from elsewhere: it must work air-gapped. Every value from the server goes into the
// page as text (textContent), never as markup.
'use strict';

const S = { csrf: null, poll: null, gen: 0 };

// Thrown once the session is gone: the sign-in page is up and the page being drawn stops.
class SignedOut extends Error {}

// ---- small helpers ----------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function say(text) {
  const s = document.getElementById('status');
  s.textContent = text;
  clearTimeout(say.t);
  say.t = setTimeout(() => { s.textContent = ''; }, 4000);
}

async function api(method, path, body, extra, retried) {
  const headers = Object.assign({}, extra || {});
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && S.csrf) headers['X-CSRF-Token'] = S.csrf;
  const resp = await fetch(path, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
  });
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (resp.status === 401 && !path.startsWith('/console/session')) {
    signInPage('Your session ended; sign in again.');
    throw new SignedOut();
  }
  // Signed in again in another tab: this tab's CSRF token is stale. Fetch the current one once.
  if (resp.status === 403 && json && json.code === 'CsrfTokenInvalid' && !retried) {
    const who = await fetch('/console/session', { credentials: 'same-origin' });
    if (who.ok) { S.csrf = (await who.json()).csrf; return api(method, path, body, extra, true); }
  }
  return { status: resp.status, ok: resp.ok, json, text, headers: resp.headers };
}

function fmt(n, digits) {
  if (typeof n !== 'number' || !isFinite(n)) return '–';
  return n.toLocaleString('en-US', { maximumFractionDigits: digits === undefined ? 1 : digits });
}

function pct(x) { return typeof x === 'number' ? fmt(x * 100, 2) + '%' : '–'; }

function cell(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

// A table of objects; `cols` is [[key, heading, render?], ...] or derived from the rows.
function table(rows, cols, caption) {
  if (!rows || rows.length === 0) return h('p', { class: 'muted' }, 'Nothing here.');
  cols = cols || Object.keys(rows[0]).map(k => [k, k]);
  return h('div', { class: 'scroll' }, h('table', {},
    caption ? h('caption', { class: 'muted' }, caption) : null,
    h('thead', {}, h('tr', {}, cols.map(([, title]) => h('th', { scope: 'col' }, title)))),
    h('tbody', {}, rows.map(r => h('tr', {}, cols.map(([k, , render]) => {
      const v = render ? render(r) : cell(r[k]);
      return h('td', { class: typeof r[k] === 'number' ? 'num' : null }, v);
    }))))));
}

function page(title, ...content) {
  const main = document.getElementById('main');
  main.replaceChildren(h('h1', {}, title), ...content);
  document.title = title + ' · httpdns console';
  main.focus();
}

// Marks the field an API error names, or shows the error under the form.
function showError(form, res, nameField) {
  form.querySelectorAll('[aria-invalid]').forEach(el => { el.removeAttribute('aria-invalid'); el.removeAttribute('aria-describedby'); });
  form.querySelectorAll('.field-error').forEach(el => el.remove());
  const body = res.json || {};
  const message = body.error || res.text || ('HTTP ' + res.status);
  let field = body.field ? String(body.field) : '';
  // The API names a resource's key by its own word (id, cidr); the form's input is `name`.
  if (nameField && (field === nameField || field === 'name')) field = 'name';
  const input = field && [...form.elements].find(el => el.name && (el.name === field || field.endsWith('.' + el.name) || field.startsWith(el.name + '.')));
  const msg = h('p', { class: 'field-error', id: 'err-' + Math.random().toString(36).slice(2), role: 'alert' },
    field ? field + ': ' + message : message);
  if (input) {
    input.setAttribute('aria-invalid', 'true');
    input.setAttribute('aria-describedby', msg.id);
    input.closest('label').append(msg);
    input.focus();
  } else {
    form.append(msg);
  }
}

function clearPoll() { if (S.poll) { clearInterval(S.poll); S.poll = null; } }

// Starts a page's poller, unless the user has moved on since the page started drawing.
function startPoll(gen, fn, ms) {
  if (gen !== S.gen) return;
  clearPoll();
  S.poll = setInterval(() => { if (gen === S.gen) fn().catch(() => {}); else clearPoll(); }, ms);
}

// ---- sign-in ----------------------------------------------------------------------------

function signInPage(note) {
  clearPoll();
  S.csrf = null;
  document.getElementById('nav').hidden = true;
  document.getElementById('signout').hidden = true;
  const form = h('form', { id: 'signin', class: 'grid' },
    h('label', {}, 'Admin token', h('input', { name: 'token', type: 'password', autocomplete: 'current-password', required: true })),
    h('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const res = await api('POST', '/console/session', { token: form.elements.token.value });
    if (!res.ok) return showError(form, res);
    S.csrf = res.json.csrf;
    signedIn();
    const target = location.hash.startsWith('#/') ? location.hash : '#/overview';
    // A changed hash routes by itself (hashchange); route only when it stays the same.
    if (location.hash !== target) location.hash = target; else route();
  });
  page('Sign in', note ? h('p', { class: 'error' }, note) : null,
    h('p', { class: 'muted' }, 'The admin token is in the server\'s data directory (admin-token) or HTTPDNS_ADMIN_TOKEN.'), form);
  form.elements.token.focus();
}

function signedIn() {
  document.getElementById('nav').hidden = false;
  document.getElementById('signout').hidden = false;
}

async function signOut() {
  const res = await api('DELETE', '/console/session').catch(e => { if (e instanceof SignedOut) return { ok: true }; throw e; });
  if (!res.ok) { say(`Not signed out: ${(res.json && res.json.error) || res.status}`); return; }
  signInPage('Signed out.');
}

// ---- overview ---------------------------------------------------------------------------

// Per-second rates between two readings; never negative (readings from two replicas behind a
// balancer, or across a restart, are not comparable: the rate shows 0 until the next pair).
function rates(prev, cur, key) {
  const dt = (cur.at_ms - prev.at_ms) / 1000;
  const out = {};
  for (const [k, v] of Object.entries(cur[key] || {})) out[k] = dt > 0 ? Math.max(0, (v - ((prev[key] || {})[k] || 0)) / dt) : 0;
  return out;
}

async function overviewPage(gen) {
  const box = h('div', {});
  page('Overview', h('p', { class: 'muted' }, 'From this server\'s own counters, refreshed every 2 seconds.'), box);
  let prev = null;
  const tick = async () => {
    const res = await api('GET', '/admin/v1/overview');
    if (!res.ok) return;
    const cur = res.json;
    const up = cur.upstream || {};
    const lookups = (up.hit || 0) + (up.miss || 0) + (up.coalesced || 0) + (up.stale || 0) + (up.error || 0);
    const m = cur.mirror;
    const cards = [
      ['Nodes up', `${cur.nodes.up} / ${cur.nodes.enabled}`],
      ['Nodes down', cur.nodes.down],
      ['Nodes disabled', cur.nodes.total - cur.nodes.enabled],
      ['Upstream cache hit rate', lookups ? pct((up.hit || 0) / lookups) : '–'],
      ['Mirror hit ratio', m.requests ? pct(m.hits / m.requests) : '–'],
      ['Snapshot revision', cur.snapshot_revision],
    ];
    const parts = [h('div', { class: 'cards' }, cards.map(([k, v]) => h('div', { class: 'card' }, h('div', { class: 'v' }, String(v)), h('div', { class: 'k' }, k))))];
    if (prev) {
      const a = rates(prev, cur, 'answers');
      const d = rates(prev, cur, 'dns_queries');
      const c = rates(prev, cur, 'answers_by_client');
      parts.push(h('h2', {}, 'Answers per second by front-end'),
        table(Object.entries(a).concat(Object.entries(d).map(([k, v]) => ['dns ' + k, v])).map(([k, v]) => ({ 'front-end': k, 'per second': Number(v.toFixed(1)) }))));
      parts.push(h('h2', {}, 'Answers per second by carrier and region'),
        table(Object.entries(c).sort((x, y) => y[1] - x[1]).map(([k, v]) => {
          const [isp, region] = k.split('/');
          return { carrier: isp, region, 'per second': Number(v.toFixed(1)) };
        })));
    } else {
      parts.push(h('p', { class: 'muted' }, 'Rates appear after the next reading.'));
    }
    box.replaceChildren(...parts);
    prev = cur;
  };
  await tick();
  startPoll(gen, tick, 2000);
}

// ---- resources (nodes, pools, domains, networks) -----------------------------------------

const KINDS = {
  nodes: {
    title: 'Nodes', path: 'nodes', name: 'id', hint: 'edge-1',
    fields: [['ip', 'IP address', 'text'], ['pool', 'Pool', 'text'], ['isp', 'Carrier', 'text'], ['region', 'Region', 'text'],
      ['bandwidth_mbps', 'Bandwidth (Mbit/s)', 'number'], ['load_pct', 'Load (%)', 'number'], ['latency_ms', 'Latency (ms)', 'number'], ['enabled', 'Enabled', 'checkbox']],
    cols: ['ip', 'pool', 'isp', 'region', 'latency_ms', 'load_pct', 'enabled'],
  },
  pools: {
    title: 'Pools', path: 'pools', name: 'name', hint: 'edge',
    fields: [['health_check.kind', 'Health check', 'select', ['', 'http', 'https', 'tcp']], ['health_check.port', 'Port', 'number'], ['health_check.path', 'Path', 'text'],
      ['health_check.interval_ms', 'Interval (ms)', 'number'], ['health_check.timeout_ms', 'Timeout (ms)', 'number'],
      ['health_check.healthy_threshold', 'Healthy after', 'number'], ['health_check.unhealthy_threshold', 'Unhealthy after', 'number']],
    cols: ['health_check'],
  },
  domains: {
    title: 'Domains', path: 'domains', name: 'name', hint: 'www.example.com',
    fields: [['pool', 'Pool', 'text'], ['ttl', 'TTL (s)', 'number'], ['max_answers', 'Answers at most', 'number']],
    cols: ['pool', 'ttl', 'max_answers'],
  },
  networks: {
    title: 'Networks', path: 'networks', name: 'cidr', hint: '1.0.1.0/24',
    fields: [['isp', 'Carrier', 'text'], ['region', 'Region', 'text']],
    cols: ['isp', 'region'],
  },
};

function deletePath(obj, path) {
  const ks = path.split('.');
  const parent = ks.slice(0, -1).reduce((o, k) => (o == null ? undefined : o[k]), obj);
  if (parent && typeof parent === 'object') delete parent[ks[ks.length - 1]];
}

function getPath(obj, path) { return path.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj); }
function setPath(obj, path, v) {
  const ks = path.split('.');
  let o = obj;
  for (const k of ks.slice(0, -1)) o = (o[k] = o[k] || {});
  o[ks[ks.length - 1]] = v;
}

function resourceForm(kind, item, done) {
  const k = KINDS[kind];
  const spec = item ? item.spec : {};
  const form = h('form', { class: 'grid', 'aria-label': item ? 'Edit ' + item.name : 'Create' },
    h('label', {}, k.name === 'id' ? 'Id' : k.name === 'cidr' ? 'CIDR' : 'Name',
      h('input', { name: 'name', value: item ? item.name : '', required: true, readonly: item ? true : null, placeholder: k.hint })),
    k.fields.map(([f, label, type, options]) => {
      const v = getPath(spec, f);
      if (type === 'checkbox') return h('label', { class: 'check' }, h('input', { type: 'checkbox', name: f, checked: item ? v !== false : true }), label);
      if (type === 'select') return h('label', {}, label, h('select', { name: f }, options.map(o => h('option', { value: o, selected: (v || '') === o ? true : null }, o || 'none'))));
      return h('label', {}, label, h('input', { name: f, type, step: type === 'number' ? 'any' : null, value: v === undefined ? '' : v }));
    }),
    h('div', { class: 'row' }, h('button', { type: 'submit' }, item ? 'Save' : 'Create'), h('button', { type: 'button', class: 'secondary', onclick: () => done(false) }, 'Cancel')));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    // Start from what is stored, so fields the form does not show (a health check's method,
    // its SNI) survive an edit.
    const body = JSON.parse(JSON.stringify(spec || {}));
    let hc = false;
    for (const [f, , type] of k.fields) {
      const el = form.elements[f];
      if (type === 'checkbox') { setPath(body, f, el.checked); continue; }
      if (el.value === '') { deletePath(body, f); continue; }
      if (f.startsWith('health_check.')) hc = true;
      setPath(body, f, type === 'number' ? Number(el.value) : el.value);
    }
    if (kind === 'pools' && !hc) delete body.health_check;
    if (kind === 'pools' && body.health_check && !body.health_check.kind) delete body.health_check;
    const name = form.elements.name.value.trim();
    // Create must not replace, and an edit must not overwrite someone else's change.
    const pre = item ? { 'If-Match': `"${item.revision}"` } : { 'If-None-Match': '*' };
    const res = await api('PUT', `/admin/v1/${k.path}/${encodeURIComponent(name)}`, body, pre);
    if (!res.ok) return showError(form, res, k.name);
    say(`${k.title.slice(0, -1)} ${name} saved.`);
    done(true);
  });
  return form;
}

async function resourcePage(kind) {
  const k = KINDS[kind];
  const q = h('input', { type: 'search', name: 'q', placeholder: 'name, address, pool, carrier…', 'aria-label': 'Filter' });
  const list = h('div', {});
  const editor = h('div', {});
  let cursor = [''];
  let seq = 0;
  const load = async () => {
    const mine = ++seq;
    const after = cursor[cursor.length - 1];
    const params = new URLSearchParams({ limit: '50' });
    if (after) params.set('after', after);
    if (q.value.trim()) params.set('q', q.value.trim());
    const res = await api('GET', `/admin/v1/${k.path}?${params}`);
    // A slower answer to an older filter must not replace a newer one.
    if (mine !== seq) return;
    if (!res.ok) { list.replaceChildren(h('p', { class: 'error' }, (res.json && res.json.error) || res.text)); return; }
    const items = res.json.items;
    const cols = [['name', k.name === 'cidr' ? 'CIDR' : k.name === 'id' ? 'Id' : 'Name']].concat(k.cols.map(c => [c, c, r => cell(r.spec[c])]));
    cols.push(['', 'Actions', r => h('span', { class: 'row' },
      h('button', { type: 'button', class: 'secondary', 'aria-label': 'Edit ' + r.name, onclick: () => edit(r) }, 'Edit'),
      kind === 'nodes' ? h('button', { type: 'button', class: 'secondary', 'aria-label': (r.spec.enabled === false ? 'Enable ' : 'Disable ') + r.name, onclick: () => toggle(r) }, r.spec.enabled === false ? 'Enable' : 'Disable') : null,
      h('button', { type: 'button', class: 'danger', 'aria-label': 'Delete ' + r.name, onclick: () => remove(r) }, 'Delete'))]);
    list.replaceChildren(table(items, cols),
      h('div', { class: 'row' },
        h('button', { type: 'button', class: 'secondary', disabled: cursor.length < 2 ? true : null, onclick: () => { cursor.pop(); load(); } }, 'Previous page'),
        h('button', { type: 'button', class: 'secondary', disabled: res.json.next ? null : true, onclick: () => { cursor.push(res.json.next); load(); } }, 'Next page'),
        h('span', { class: 'muted' }, `${items.length} shown`)));
  };
  const edit = item => { editor.replaceChildren(resourceForm(kind, item, saved => { editor.replaceChildren(); if (saved) load(); })); editor.querySelector('input:not([readonly])').focus(); };
  const toggle = async item => {
    const spec = Object.assign({}, item.spec, { enabled: item.spec.enabled === false });
    const res = await api('PUT', `/admin/v1/${k.path}/${encodeURIComponent(item.name)}`, spec, { 'If-Match': `"${item.revision}"` });
    say(res.ok ? `${item.name} ${spec.enabled ? 'enabled' : 'disabled'}.` : `Not changed: ${(res.json && res.json.error) || res.status}`);
    load();
  };
  const remove = async item => {
    if (!confirm(`Delete ${item.name}?`)) return;
    const res = await api('DELETE', `/admin/v1/${k.path}/${encodeURIComponent(item.name)}`);
    say(res.ok ? `${item.name} deleted.` : `Not deleted: ${(res.json && res.json.error) || res.status}`);
    load();
  };
  let t = null;
  q.addEventListener('input', () => { clearTimeout(t); t = setTimeout(() => { cursor = ['']; load(); }, 250); });
  page(k.title,
    h('div', { class: 'row' }, q, h('button', { type: 'button', onclick: () => edit(null) }, 'Create')),
    editor, list);
  await load();
}

// ---- explain ----------------------------------------------------------------------------

async function explainPage() {
  const form = h('form', { class: 'grid' },
    h('label', {}, 'Name', h('input', { name: 'dn', required: true, placeholder: 'www.example.com' })),
    h('label', {}, 'Client address', h('input', { name: 'ip', placeholder: '1.0.2.7' })),
    h('label', {}, 'or carrier', h('input', { name: 'isp', placeholder: 'unicom' })),
    h('label', {}, 'and region', h('input', { name: 'region', placeholder: 'shanghai' })),
    h('label', {}, 'Family', h('select', { name: 'type' }, ['a', 'aaaa', 'addrs'].map(t => h('option', { value: t }, t)))),
    h('button', { type: 'submit' }, 'Explain'));
  const out = h('div', {});
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const f of ['dn', 'ip', 'isp', 'region', 'type']) if (form.elements[f].value) p.set(f, form.elements[f].value);
    const res = await api('GET', '/admin/v1/explain?' + p);
    if (!res.ok) return showError(form, res);
    const e = res.json;
    const parts = [h('p', {}, `Client ${e.client.ip}: carrier ${e.client.isp || 'unknown'}, region ${e.client.region || 'unknown'}; ${e.managed ? 'a managed name' : 'not managed here'} (snapshot ${e.snapshot_revision}).`)];
    for (const a of e.answers || []) {
      const rows = a.nodes || a.candidates || [];
      parts.push(h('h2', {}, `${a.family || ''} answer: ${(a.answer || []).join(', ') || 'none'}`));
      if (Array.isArray(rows) && rows.length) parts.push(table(rows.map(r => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, typeof v === 'object' && v !== null ? JSON.stringify(v) : v])))));
      else parts.push(h('pre', { class: 'diff' }, JSON.stringify(a, null, 2)));
    }
    out.replaceChildren(...parts);
  });
  page('Explain an answer', h('p', { class: 'muted' }, 'The ranking with every score term, computed by the same code as /d.'), form, out);
}

// ---- mirror -----------------------------------------------------------------------------

async function mirrorPage() {
  const report = h('div', {});
  let prev = null;
  const load = async () => {
    const [rules, rep] = await Promise.all([api('GET', '/admin/v1/mirror/rules?limit=500'), api('GET', '/admin/v1/mirror/report')]);
    const now = Date.now();
    const rows = (rep.json ? rep.json.rules : []).map(r => {
      const before = prev && prev.rows.find(p => p.rule === r.rule);
      const bw = before ? (r.bytes_served - before.bytes_served) / ((now - prev.at) / 1000) : null;
      return Object.assign({}, r, { bandwidth: bw });
    });
    prev = { at: now, rows };
    report.replaceChildren(
      h('h2', {}, 'Rules'),
      table((rules.json ? rules.json.items : []).map(r => ({ name: r.name, path_prefix: r.spec.path_prefix, origin: r.spec.origin, pass_query: r.spec.pass_query }))),
      h('h2', {}, 'Traffic per prefix since start'),
      table(rows, [['path_prefix', 'Prefix'], ['requests', 'Requests'], ['hits', 'Hits'], ['hit_ratio', 'Hit ratio', r => pct(r.hit_ratio)],
        ['back_to_source', 'Back to source'], ['bytes_served', 'Bytes served', r => fmt(r.bytes_served, 0)],
        ['bytes_from_origin', 'Bytes from origin', r => fmt(r.bytes_from_origin, 0)],
        ['bandwidth', 'Bandwidth (B/s)', r => r.bandwidth === null ? '–' : fmt(r.bandwidth, 0)]]),
      h('button', { type: 'button', class: 'secondary', onclick: load }, 'Refresh'));
  };
  const purge = h('form', { class: 'grid', 'aria-label': 'Purge' },
    h('label', {}, 'Path', h('input', { name: 'path', required: true, placeholder: '/image/a.jpg' })),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'prefix' }), 'Everything under it'),
    h('button', { type: 'submit', class: 'danger' }, 'Purge'));
  const purged = h('p', { role: 'status' });
  purge.addEventListener('submit', async ev => {
    ev.preventDefault();
    const res = await api('POST', '/admin/v1/mirror/purge', { path: purge.elements.path.value, prefix: purge.elements.prefix.checked });
    if (!res.ok) return showError(purge, res);
    purged.textContent = `Purged ${res.json.purged} stored cop${res.json.purged === 1 ? 'y' : 'ies'} of ${res.json.path}.`;
  });
  const lookup = h('form', { class: 'grid', 'aria-label': 'Look up an object' },
    h('label', {}, 'Path', h('input', { name: 'path', required: true, placeholder: '/image/a.jpg' })),
    h('button', { type: 'submit', class: 'secondary' }, 'Look up'));
  const found = h('div', { role: 'status' });
  lookup.addEventListener('submit', async ev => {
    ev.preventDefault();
    const path = lookup.elements.path.value.startsWith('/') ? lookup.elements.path.value : '/' + lookup.elements.path.value;
    if (path.split('/').some(seg => seg === '.' || seg === '..')) {
      return showError(lookup, { status: 400, json: { field: 'path', error: 'no . or .. segments in a mirror path' } });
    }
    // `?` and `#` are part of the key here, not the URL's query or fragment.
    const res = await api('GET', '/admin/v1/mirror/objects' + path.replace(/\?/g, '%3F').replace(/#/g, '%23'));
    if (res.status === 404 && res.json && res.json.code === 'NotFound') { found.replaceChildren(h('p', {}, `Not stored: ${path}`)); return; }
    if (!res.ok) return showError(lookup, res);
    const o = res.json;
    found.replaceChildren(table([{ stored: 'yes', size: o.length, etag: o.etag, 'content type': o.content_type, 'age (s)': o.age_s }]));
  });
  page('Mirror', report, h('h2', {}, 'Purge'), purge, purged, h('h2', {}, 'Object lookup'), lookup, found);
  await load();
}

// ---- config center ----------------------------------------------------------------------

// A line diff (longest common subsequence), enough for documents of a few hundred lines.
function diffLines(a, b) {
  const x = a.split('\n'), y = b.split('\n');
  const n = x.length, m = y.length;
  const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push(['  ', x[i]]); i++; j++; } else if (L[i + 1][j] >= L[i][j + 1]) { out.push(['- ', x[i++]]); } else { out.push(['+ ', y[j++]]); }
  }
  while (i < n) out.push(['- ', x[i++]]);
  while (j < m) out.push(['+ ', y[j++]]);
  return out;
}

function diffView(a, b) {
  // The table is lines × lines: past a few thousand each way, say so instead of freezing the tab.
  if (a.split('\n').length * b.split('\n').length > 4e6) return h('p', { class: 'muted' }, 'Too large to compare here; use the API and a diff tool.');
  const lines = diffLines(a, b);
  if (!lines.some(([t]) => t !== '  ')) return h('p', { class: 'muted' }, 'No difference.');
  return h('pre', { class: 'diff', 'aria-label': 'Difference' }, lines.map(([t, l]) => h('span', { class: t === '+ ' ? 'add' : t === '- ' ? 'del' : null }, t + l + '\n')));
}

function pretty(doc) { const d = Object.assign({}, doc); delete d.configVersion; return JSON.stringify(d, null, 2); }

async function configPage(module) {
  const mods = await api('GET', '/admin/v1/config');
  const items = mods.ok ? mods.json.items : [];
  const pick = h('select', { name: 'module', 'aria-label': 'Module', onchange: ev => { location.hash = '#/config/' + encodeURIComponent(ev.target.value); } },
    h('option', { value: '' }, 'choose a module'), items.map(m => h('option', { value: m.module, selected: m.module === module ? true : null }, `${m.module} (v${m.version})`)));
  const newName = h('input', { name: 'new', placeholder: 'new module name', 'aria-label': 'New module name' });
  const head = h('div', { class: 'row' }, pick, newName, h('button', { type: 'button', class: 'secondary', onclick: () => { if (newName.value) location.hash = '#/config/' + encodeURIComponent(newName.value); } }, 'New module'));
  if (!module) return page('Config center', head, table(items.map(m => ({ module: m.module, version: m.version, updated: new Date(m.updated_at_ms).toISOString() }))));

  const cur = await api('GET', `/admin/v1/config/${encodeURIComponent(module)}`);
  const exists = cur.ok;
  const version = exists ? cur.json.configVersion : null;
  const currentText = exists ? pretty(cur.json) : '';
  const starter = { mergeHostConfigs: [], hostListConfig: [{ host: 'cdn.example.com', rate: 1 }], reviveProbeInterval: 600000, configRequestInterval: 600000, publicIpList: [] };
  const form = h('form', { 'aria-label': 'Publish' },
    h('label', {}, 'Document', h('textarea', { name: 'document', spellcheck: 'false' }, exists ? currentText : JSON.stringify(starter, null, 2))),
    h('label', {}, 'Summary (optional)', h('input', { name: 'summary', placeholder: 'what changed and why' })),
    h('div', { class: 'row' },
      h('button', { type: 'button', class: 'secondary', name: 'preview' }, 'Preview difference'),
      h('button', { type: 'button', class: 'secondary', name: 'dry' }, 'Dry run'),
      h('button', { type: 'submit' }, exists ? `Publish over version ${version}` : 'Publish the first version')));
  const result = h('div', { role: 'status' });
  const body = () => form.elements.document.value;
  const headers = () => {
    // "0": the module must not exist yet, so a concurrent first publish is not overwritten.
    const hd = { 'If-Match': exists ? `"${version}"` : '"0"' };
    if (form.elements.summary.value) hd['X-Config-Summary'] = form.elements.summary.value;
    return hd;
  };
  const summaryOk = () => {
    if (/^[\x20-\x7e]*$/.test(form.elements.summary.value)) return true;
    showError(form, { status: 400, json: { field: 'summary', error: 'printable ASCII only (it travels in the X-Config-Summary header)' } });
    return false;
  };
  const parsed = () => { try { return JSON.parse(body()); } catch (e) { result.replaceChildren(h('p', { class: 'error' }, 'Not JSON: ' + e.message)); return null; } };
  form.elements.preview.addEventListener('click', () => { const d = parsed(); if (d) result.replaceChildren(h('h2', {}, `Difference to version ${version || 'none'}`), diffView(currentText, pretty(d))); });
  form.elements.dry.addEventListener('click', async () => {
    if (!parsed() || !summaryOk()) return;
    const res = await api('PUT', `/admin/v1/config/${encodeURIComponent(module)}?dry_run=1`, body(), headers());
    if (!res.ok) return conflictOrError(res);
    result.replaceChildren(h('p', { class: 'ok' }, `Valid. ${res.json.summary}`));
  });
  const conflictOrError = res => {
    if (res.status === 412) {
      result.replaceChildren(h('p', { class: 'error', role: 'alert' },
        `Someone published meanwhile: ${(res.json && res.json.error) || 'the version changed'}. Your text is kept here; reload to see theirs and publish again.`),
        h('button', { type: 'button', class: 'secondary', onclick: () => configPage(module) }, 'Reload (your edits are lost)'));
      return;
    }
    showError(form, res);
  };
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const d = parsed();
    if (!d || !summaryOk()) return;
    if (!confirm(`Publish ${module}? Apps receive it at their next poll.`)) return;
    const res = await api('PUT', `/admin/v1/config/${encodeURIComponent(module)}`, body(), headers());
    if (!res.ok) return conflictOrError(res);
    say(`Published ${module}.`);
    configPage(module);
  });

  const hist = await api('GET', `/admin/v1/config/${encodeURIComponent(module)}/versions?limit=50`);
  const versions = hist.ok ? hist.json.items : [];
  const a = h('select', { 'aria-label': 'From version' }, versions.map(v => h('option', { value: v.version }, 'v' + v.version)));
  const b = h('select', { 'aria-label': 'To version' }, versions.map(v => h('option', { value: v.version }, 'v' + v.version)));
  if (versions.length > 1) a.selectedIndex = 1;
  const diffOut = h('div', {});
  const compare = async () => {
    const [x, y] = await Promise.all([a.value, b.value].map(v => api('GET', `/admin/v1/config/${encodeURIComponent(module)}/versions/${v}`)));
    if (x.ok && y.ok) diffOut.replaceChildren(diffView(pretty(x.json), pretty(y.json)));
  };
  const rollback = async v => {
    if (!confirm(`Publish version ${v}'s content as a new version?`)) return;
    const res = await api('POST', `/admin/v1/config/${encodeURIComponent(module)}/rollback`, { to: v }, { 'If-Match': `"${version}"` });
    if (!res.ok) return say(`Not rolled back: ${(res.json && res.json.error) || res.status}`);
    say(`Rolled back to version ${v}.`);
    configPage(module);
  };
  const gray = exists ? table((cur.json.hostListConfig || []).map(x => ({ host: x.host, rate: x.rate, share: pct(x.rate) })), null, 'Gray release per host (rate)') : null;
  page(`Config: ${module}`, head,
    exists ? h('p', {}, `Current version ${version}.`) : h('p', { class: 'muted' }, 'No version yet.'),
    gray, form, result,
    h('h2', {}, 'History'),
    table(versions, [['version', 'Version'], ['author', 'Author'], ['summary', 'Summary'], ['created_at_ms', 'Published', r => new Date(r.created_at_ms).toISOString()],
      ['', '', r => r.version === version ? h('span', { class: 'muted' }, 'current') : h('button', { type: 'button', class: 'secondary', onclick: () => rollback(r.version) }, `Roll back to v${r.version}`)]]),
    versions.length > 1 ? h('div', {}, h('h2', {}, 'Compare versions'), h('div', { class: 'row' }, a, b, h('button', { type: 'button', class: 'secondary', onclick: compare }, 'Compare')), diffOut) : null);
}

// ---- events and the LocalDNS map ---------------------------------------------------------

function windowPicker(current, go) {
  return h('label', {}, 'Window', h('select', { name: 'window', onchange: ev => go(ev.target.value) },
    ['5m', '15m', '1h', '6h', '1d', '7d'].map(w => h('option', { value: w, selected: w === current ? true : null }, w))));
}

async function eventsPage(win) {
  win = win || '5m';
  const res = await api('GET', '/admin/v1/events/summary?window=' + encodeURIComponent(win));
  const v = res.json || {};
  page('Client events', windowPicker(win, w => { location.hash = '#/events/' + w; }),
    res.ok ? h('p', { class: 'muted' }, `${v.replicas} replica(s) reporting; a place is flagged past ${pct(v.alert_rate)} of at least ${v.alert_min_requests} requests.`) : h('p', { class: 'error' }, (v && v.error) || res.text),
    h('h2', {}, 'By carrier and region'),
    table(v.rates || [], [['isp', 'Carrier'], ['region', 'Region'], ['requests', 'Requests'], ['error_rate', 'Error rate', r => pct(r.error_rate)], ['top_error', 'Top error'],
      ['fallback_rate', 'Fallback rate', r => pct(r.fallback_rate)], ['top_fallback_reason', 'Top fallback reason'],
      ['alert', 'Alert', r => r.alert ? h('strong', { class: 'error' }, 'ALERT ' + r.alert_errors.concat(r.alert_fallback_reasons).join(', ')) : 'no']]),
    h('h2', {}, 'By side of the convergence switch'),
    table(v.convergence || [], [['convergence', 'Side'], ['requests', 'Requests'], ['error_rate', 'Error rate', r => pct(r.error_rate)], ['fallback_rate', 'Fallback rate', r => pct(r.fallback_rate)]]),
    h('h2', {}, 'Every key'),
    table(v.events || [], [['event', 'Event'], ['isp', 'Carrier'], ['region', 'Region'], ['reason', 'Reason'], ['host', 'Host'], ['convergence', 'Side'], ['count', 'Count'], ['mean_duration_ms', 'Mean ms']]));
}

async function localdnsPage(win) {
  win = win || '1h';
  const res = await api('GET', '/admin/v1/localdns/map?window=' + encodeURIComponent(win));
  const v = res.json || {};
  page('LocalDNS map', windowPicker(win, w => { location.hash = '#/localdns/' + w; }),
    h('p', { class: 'muted' }, 'Sampled system-resolver answers beside HTTPDNS\'s, judged by this service: worst places first.'),
    table(v.map || [], [['isp', 'Carrier'], ['region', 'Region'], ['reports', 'Reports'], ['consistent', 'Consistent'],
      ['hijacked_rate', 'Hijacked', r => pct(r.hijacked_rate)], ['cross_carrier_rate', 'Cross-carrier', r => pct(r.cross_carrier_rate)],
      ['stale_rate', 'Stale', r => pct(r.stale_rate)], ['invalid_rate', 'Invalid', r => pct(r.invalid_rate)], ['unverified_rate', 'Unverified', r => pct(r.unverified_rate)]]));
}

// ---- routing ----------------------------------------------------------------------------

async function route() {
  // Only `#/...` is a page: `#main` (the skip link) moves focus, nothing else.
  if (location.hash && !location.hash.startsWith('#/')) return;
  clearPoll();
  const gen = ++S.gen;
  let name, arg;
  try {
    [name, arg] = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  } catch (_) {
    name = 'overview';
  }
  document.querySelectorAll('#nav a').forEach(a => {
    if (a.getAttribute('href') === '#/' + (name || 'overview')) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  });
  if (!S.csrf) return signInPage();
  try {
    if (KINDS[name]) return await resourcePage(name);
    switch (name) {
      case 'explain': return await explainPage();
      case 'mirror': return await mirrorPage();
      case 'config': return await configPage(arg);
      case 'events': return await eventsPage(arg);
      case 'localdns': return await localdnsPage(arg);
      default: return await overviewPage(gen);
    }
  } catch (e) {
    if (e instanceof SignedOut) return;
    page('Error', h('p', { class: 'error' }, String(e)));
  }
}

async function start() {
  document.getElementById('signout').addEventListener('click', signOut);
  window.addEventListener('hashchange', route);
  const who = await api('GET', '/console/session');
  if (who.ok) { S.csrf = who.json.csrf; signedIn(); }
  route();
}

document.addEventListener('DOMContentLoaded', start);
