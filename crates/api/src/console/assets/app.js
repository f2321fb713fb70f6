// The httpdns admin console: one page over the admin API (docs/console.md). No framework and
// nothing from elsewhere: it must work air-gapped. Every value from the server goes into the
// page as text (textContent), never as markup.
'use strict';

const S = { csrf: null, poll: null, gen: 0, role: null, name: null };
// Whether the signed-in token may change things (viewers read only; the admin API refuses
// them anyway, this only hides what would be refused).
function may(role) {
  const order = ['viewer', 'operator', 'admin'];
  return order.indexOf(S.role) >= order.indexOf(role || 'operator');
}

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
    if (who.ok) { const w = await who.json(); S.csrf = w.csrf; S.role = w.role; S.name = w.name; return api(method, path, body, extra, true); }
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
  // Parts a page leaves out are null: nothing, not the text "null".
  main.replaceChildren(h('h1', {}, title), ...content.flat().filter(c => c !== null && c !== undefined && c !== false));
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
  document.getElementById('who').textContent = '';
  const form = h('form', { id: 'signin', class: 'grid' },
    h('label', {}, 'Token', h('input', { name: 'token', type: 'password', autocomplete: 'current-password', required: true })),
    h('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const res = await api('POST', '/console/session', { token: form.elements.token.value });
    if (!res.ok) return showError(form, res);
    S.csrf = res.json.csrf;
    S.role = res.json.role;
    S.name = res.json.name;
    signedIn();
    const target = location.hash.startsWith('#/') ? location.hash : '#/overview';
    // A changed hash routes by itself (hashchange); route only when it stays the same.
    if (location.hash !== target) location.hash = target; else route();
  });
  page('Sign in', note ? h('p', { class: 'error' }, note) : null,
    h('p', { class: 'muted' }, 'The admin token is in the server\'s data directory (admin-token) or HTTPDNS_ADMIN_TOKEN; named tokens come from an admin (Tokens).'), form);
  form.elements.token.focus();
}

function signedIn() {
  document.getElementById('nav').hidden = false;
  document.getElementById('signout').hidden = false;
  document.getElementById('who').textContent = S.name ? `${S.name} (${S.role})` : '';
  document.getElementById('nav-tokens').hidden = !may('admin');
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

// The vendors' server-side switches in force (docs/api.md, "Vendor switches"): one line, so that
// a kill switch left on is seen; set with PUT /admin/v1/vendor-switches.
async function vendorSwitchesLine() {
  const res = await api('GET', '/admin/v1/vendor-switches');
  if (!res.ok) return h('p', { class: 'error' }, 'Vendor switches: ' + ((res.json && res.json.error) || res.status));
  const g = res.json.global || {};
  const n = Object.keys(res.json.accounts || {}).length;
  const status = g.alibaba_service_status || 'not sent';
  return h('p', { id: 'vendor-switches', class: g.alibaba_service_status === 'disable' ? 'error' : 'muted' },
    `Vendor switches: Alibaba /ss service_status ${status}; Tencent /conf log:${g.tencent_log ? 1 : 0} domain:${g.tencent_domain ? 1 : 0}` +
    (n ? `; ${n} account override(s)` : '') + '.');
}

async function overviewPage(gen) {
  const box = h('div', {});
  const switches = h('p', { class: 'muted' }, 'Vendor switches: …');
  page('Overview', h('p', { class: 'muted' }, 'From this server\'s own counters, refreshed every 2 seconds.'), switches, box);
  vendorSwitchesLine().then(line => { if (gen === S.gen) switches.replaceWith(line); }).catch(() => {});
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
    // Split, rules, backup and cname are kept as stored by an edit; docs/scheduling.md.
    fields: [['pool', 'Pool', 'text'], ['ttl', 'TTL (s)', 'number'], ['max_answers', 'Answers at most', 'number']],
    cols: ['pool', 'split', 'cname', 'ttl', 'max_answers'],
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
    if (may()) cols.push(['', 'Actions', r => h('span', { class: 'row' },
      h('button', { type: 'button', class: 'secondary', 'aria-label': 'Edit ' + r.name, onclick: () => edit(r) }, 'Edit'),
      kind === 'nodes' ? h('button', { type: 'button', class: 'secondary', 'aria-label': (r.spec.enabled === false ? 'Enable ' : 'Disable ') + r.name, onclick: () => toggle(r) }, r.spec.enabled === false ? 'Enable' : 'Disable') : null,
      kind === 'domains' ? h('button', { type: 'button', class: 'secondary', 'aria-label': 'Figures of ' + r.name, onclick: () => domainFigures(r.name, editor) }, 'Figures') : null,
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
    h('div', { class: 'row' }, q, may() ? h('button', { type: 'button', onclick: () => edit(null) }, 'Create') : null),
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
    h('label', {}, 'App version', h('input', { name: 'app_version', placeholder: '5.2.0' })),
    h('label', {}, 'Tag', h('input', { name: 'tag', placeholder: 'beta' })),
    h('label', {}, 'Family', h('select', { name: 'type' }, ['a', 'aaaa', 'addrs'].map(t => h('option', { value: t }, t)))),
    h('button', { type: 'submit' }, 'Explain'));
  const out = h('div', {});
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const f of ['dn', 'ip', 'isp', 'region', 'app_version', 'tag', 'type']) if (form.elements[f].value) p.set(f, form.elements[f].value);
    const res = await api('GET', '/admin/v1/explain?' + p);
    if (!res.ok) return showError(form, res);
    const e = res.json;
    const parts = [h('p', {}, `Client ${e.client.ip}: carrier ${e.client.isp || 'unknown'}, region ${e.client.region || 'unknown'}; ${e.managed ? 'a managed name' : 'not managed here'}${e.cname ? ', an alias of ' + e.cname : ''} (snapshot ${e.snapshot_revision}).`)];
    for (const a of e.answers || []) {
      const rows = a.nodes || a.candidates || [];
      parts.push(h('h2', {}, `${a.family || ''} answer: ${(a.answer || []).join(', ') || 'none'}`));
      // Which rule, split entry or backup chose the pool (docs/scheduling.md, "Seeing the decision").
      const why = a.decided_by === 'rule' ? `rule ${a.rule.index + 1} (${JSON.stringify(a.rule.match)})`
        : a.decided_by === 'split' ? `split entry ${a.split.index + 1} (weight ${a.split.weight} of ${a.split.total_weight})`
        : a.decided_by === 'backup' ? `the backup: ${a.chosen_pool} had too few nodes up` : 'the domain\'s pool';
      if (a.pool) parts.push(h('p', { class: 'decided' }, `Pool ${a.pool}, chosen by ${why}.`));
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
      table((rules.json ? rules.json.items : []).map(r => ({ name: r.name, path_prefix: r.spec.path_prefix,
        origin: [r.spec.origin, ...(r.spec.origins || []).map(o => o.url)].filter(Boolean).join(', '),
        store: r.spec.store === false ? 'proxy' : 'yes', pass_query: r.spec.pass_query }))),
      h('h2', {}, 'Traffic per prefix since start'),
      mirrorChart(rows),
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
  // Prefetch: copies filled ahead of traffic, the job's progress polled until it ends.
  const prefetch = h('form', { class: 'grid', 'aria-label': 'Prefetch' },
    h('label', {}, 'Paths, one per line', h('textarea', { name: 'paths', required: true, rows: 4, placeholder: '/image/a.jpg' })),
    h('button', { type: 'submit', class: 'secondary' }, 'Prefetch'));
  const progress = h('div', { role: 'status', id: 'prefetch-progress' });
  const watch = async id => {
    for (;;) {
      const res = await api('GET', '/admin/v1/mirror/prefetch/' + encodeURIComponent(id));
      if (!res.ok) return showError(prefetch, res);
      const p = res.json;
      const finished = p.done + p.failed;
      progress.replaceChildren(
        h('progress', { max: String(Math.max(p.total, 1)), value: String(finished), 'aria-label': 'Prefetch progress' }),
        h('p', {}, `${finished} of ${p.total}: ${p.done} filled, ${p.failed} failed (${p.state})`));
      if (p.state !== 'running' || !progress.isConnected) return;
      await new Promise(r => setTimeout(r, 1000));
    }
  };
  prefetch.addEventListener('submit', async ev => {
    ev.preventDefault();
    const paths = prefetch.elements.paths.value.split('\n').map(l => l.trim()).filter(Boolean);
    const res = await api('POST', '/admin/v1/mirror/prefetch', { paths });
    if (!res.ok) return showError(prefetch, res);
    watch(res.json.id);
  });
  page('Mirror', report, may() ? h('h2', {}, 'Purge') : null, may() ? purge : null, purged, h('h2', {}, 'Object lookup'), lookup, found,
    may() ? h('h2', {}, 'Prefetch') : null, may() ? prefetch : null, progress);
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
    gray, may() ? form : null, result,
    exists ? await rolloutView(module) : null,
    exists ? await adoptionView(module) : null,
    h('h2', {}, 'History'),
    table(versions, [['version', 'Version'], ['author', 'Author'], ['summary', 'Summary'], ['created_at_ms', 'Published', r => new Date(r.created_at_ms).toISOString()],
      ['', '', r => r.version === version ? h('span', { class: 'muted' }, 'current') : may() ? h('button', { type: 'button', class: 'secondary', onclick: () => rollback(r.version) }, `Roll back to v${r.version}`) : null]]),
    versions.length > 1 ? h('div', {}, h('h2', {}, 'Compare versions'), h('div', { class: 'row' }, a, b, h('button', { type: 'button', class: 'secondary', onclick: compare }, 'Compare')), diffOut) : null);
}

// ---- rollouts, adoption, audit, tokens (issue 42) -----------------------------------------

async function rolloutView(module) {
  const base = `/admin/v1/config/${encodeURIComponent(module)}/rollout`;
  const res = await api('GET', base);
  const box = h('div', {}, h('h2', {}, 'Guarded rollout'));
  const act = async action => {
    const r = await api('POST', `${base}/${action}`);
    say(r.ok ? `Rollout: ${r.json.state}.` : `Not done: ${(r.json && r.json.error) || r.status}`);
    configPage(module);
  };
  if (res.ok) {
    const r = res.json;
    const side = (name, x) => ({ side: name, version: name === 'new' ? r.version : r.previous, requests: fmt(x.requests, 0),
      'error rate': pct(x.error_rate), 'fallback rate': pct(x.fallback_rate) });
    box.append(
      h('p', {}, `State ${r.state}, step ${r.step + 1} of ${r.spec.steps.length}, ${pct(r.share)} of devices on ` +
        (r.version ? `version ${r.version}` : 'the next publish') + ` (the rest keep version ${r.previous}).`),
      h('p', { class: r.state === 'rolled_back' ? 'error' : 'muted' }, r.reason),
      rolloutChart(r),
      table([side('new', r.new), side('old', r.old)], null, 'Both sides since the step began'),
      table(r.places.map(p => ({ place: p.place, 'new requests': fmt(p.new.requests, 0), 'new errors': pct(p.new.error_rate),
        'old errors': pct(p.old.error_rate), 'new fallbacks': pct(p.new.fallback_rate), 'old fallbacks': pct(p.old.fallback_rate) })), null, 'Per carrier and region'));
    if (may()) {
      const buttons = { running: ['pause', 'promote', 'abort'], paused: ['resume', 'promote', 'abort'] }[r.state] || [];
      box.append(h('div', { class: 'row' }, buttons.map(a => h('button', { type: 'button', class: a === 'abort' ? 'danger' : 'secondary', onclick: () => act(a) }, a[0].toUpperCase() + a.slice(1)))));
    }
  } else {
    box.append(h('p', { class: 'muted' }, 'No rollout. Arm one before publishing: the next version then goes to a growing share of devices and rolls back by itself past the limits.'));
  }
  if (may() && !(res.ok && ['running', 'paused'].includes(res.json.state))) {
    const spec = { steps: [0.01, 0.1, 0.5, 1], step_seconds: 600, max_error_rate: 0.01, max_fallback_rate: 0.01 };
    const form = h('form', { 'aria-label': 'Arm a rollout' },
      h('label', {}, 'Rollout', h('textarea', { name: 'spec', spellcheck: 'false' }, JSON.stringify(spec, null, 2))),
      h('button', { type: 'submit' }, 'Arm for the next publish'));
    form.addEventListener('submit', async ev => {
      ev.preventDefault();
      const r = await api('PUT', base, form.elements.spec.value);
      if (!r.ok) return showError(form, r);
      say('Rollout armed.');
      configPage(module);
    });
    box.append(form);
  }
  return box;
}

// Both sides' error and fallback rates per place (and in all), as bars: new (k1) above old (k0),
// with the limit as a dashed line.
function rolloutChart(r) {
  const rows = [{ place: 'all places', new: r.new, old: r.old }].concat(r.places);
  const bars = [['error_rate', 'error'], ['fallback_rate', 'fallback']];
  const W = 760, L = 190, R = 70, BAR = 9, GAP = 1, BAND = bars.length * 2 * (BAR + GAP) + 12, T = 8;
  const H = T + rows.length * BAND + 26;
  const limit = Math.max(r.spec.max_error_rate, r.spec.max_fallback_rate);
  const top = Math.max(limit * 1.5, ...rows.flatMap(p => bars.flatMap(([k]) => [p.new[k], p.old[k]])), 0.001);
  const x = v => L + v / top * (W - L - R);
  const parts = [];
  rows.forEach((p, i) => {
    const y = T + i * BAND;
    parts.push(svg('text', { class: 'rule-label', x: L - 8, y: y + BAND / 2, 'text-anchor': 'end' }, p.place));
    bars.forEach(([k, label], j) => {
      [['new', 'k1'], ['old', 'k0']].forEach(([side, cls], n) => {
        const v = p[side][k] || 0;
        const y0 = y + (j * 2 + n) * (BAR + GAP);
        parts.push(svg('rect', { class: 'bar ' + cls, x: L, y: y0, width: Math.max(1, x(v) - L).toFixed(1), height: BAR },
          tip(`${p.place}: ${label} rate on the ${side} version ${pct(v)}`)),
        svg('text', { class: 'tick', x: Math.max(1, x(v)) + 4, y: y0 + BAR - 1 }, `${label} ${pct(v)}`));
      });
    });
  });
  parts.push(svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - 22 }),
    svg('line', { class: 'threshold', x1: x(limit), x2: x(limit), y1: T, y2: H - 22 }),
    svg('text', { class: 'threshold-label', x: x(limit), y: H - 8, 'text-anchor': 'middle' }, `limit ${pct(limit)}`));
  const chart = svg('svg', { class: 'rollout-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Error and fallback rates of both sides' }, parts);
  return figure('rollout-chart', 'Both sides since the step began', chart, legendList([['k1', 'new version'], ['k0', 'previous version']]));
}

async function adoptionView(module) {
  const res = await api('GET', `/admin/v1/config/${encodeURIComponent(module)}/adoption?window=1h`);
  if (!res.ok) return null;
  const a = res.json;
  return h('div', {}, h('h2', {}, 'Adoption (last hour)'),
    table(a.versions.map(v => ({ version: v.version, devices: fmt(v.devices, 0), share: a.devices ? pct(v.devices / a.devices) : '–' }))),
    h('p', { class: 'muted' }, `About ${fmt(a.devices, 0)} devices; counts are estimates within ±${pct(a.standard_error)} (one standard error).`));
}

async function auditPage(before) {
  const params = new URLSearchParams({ limit: '100' });
  if (before) params.set('before', before);
  const res = await api('GET', `/admin/v1/audit?${params}`);
  if (!res.ok) return page('Audit', h('p', { class: 'error' }, (res.json && res.json.error) || res.text));
  const items = res.json.items;
  page('Audit',
    h('p', { class: 'muted' }, 'Every change, newest first: through the admin API, the console, apply, and the automatic ones (controller, rollout).'),
    table(items, [['seq', '#'], ['at_ms', 'Time', r => new Date(r.at_ms).toISOString()], ['actor', 'Actor'], ['method', 'Method'],
      ['path', 'Path'], ['revision_before', 'Before', r => cell(r.revision_before)], ['revision_after', 'After', r => cell(r.revision_after)],
      ['detail', 'Detail']]),
    res.json.next_before ? h('a', { href: `#/audit/${res.json.next_before}` }, 'Older') : null);
}

async function tokensPage(made) {
  const res = await api('GET', '/admin/v1/tokens');
  // A token just made is shown here once; the server never shows it again.
  const shown = h('div', { role: 'status' }, made ? [h('p', { class: 'ok' }, `Token of ${made.name} (shown once): `), h('code', {}, made.token)] : null);
  const form = h('form', { class: 'grid', 'aria-label': 'Make a token' },
    h('label', {}, 'Name', h('input', { name: 'name', required: true, placeholder: 'alice' })),
    h('label', {}, 'Role', h('select', { name: 'role' }, ['viewer', 'operator', 'admin'].map(r => h('option', { value: r }, r)))),
    h('button', { type: 'submit' }, 'Make token'));
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const name = form.elements.name.value.trim();
    const r = await api('PUT', `/admin/v1/tokens/${encodeURIComponent(name)}`, { role: form.elements.role.value });
    if (!r.ok) return showError(form, r, 'name');
    await tokensPage({ name, token: r.json.token });
  });
  const revoke = async name => {
    if (!confirm(`Revoke ${name}? It stops working at once.`)) return;
    const r = await api('DELETE', `/admin/v1/tokens/${encodeURIComponent(name)}`);
    say(r.ok ? `${name} revoked.` : `Not revoked: ${(r.json && r.json.error) || r.status}`);
    tokensPage();
  };
  const cols = [['name', 'Name'], ['role', 'Role'], ['created_by', 'Made by'], ['created_at_ms', 'Made', r => new Date(r.created_at_ms).toISOString()]];
  if (may('admin')) cols.push(['', '', r => h('button', { type: 'button', class: 'danger', onclick: () => revoke(r.name) }, 'Revoke')]);
  page('Tokens', table(res.ok ? res.json.items : [], cols), may('admin') ? form : null, shown);
}

// ---- charts (inline SVG, drawn here: no library, nothing from elsewhere) -----------------
// Colours come from classes in app.css (the CSP allows no style attributes); every value from
// the server goes in as text or as a number, never as markup.

const SVGNS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// A tooltip (the browser shows an SVG <title> on hover) and the accessible name of a mark.
function tip(text) { return svg('title', {}, text); }

// A round upper bound for an axis and its tick step (whole steps for counts).
function niceScale(max, whole) {
  if (!(max > 0)) max = 1;
  const e = Math.pow(10, Math.floor(Math.log10(max)));
  const f = max / e;
  const [top, parts] = f <= 1 ? [1, 5] : f <= 2 ? [2, 4] : f <= 5 ? [5, 5] : [10, 5];
  const step = top * e / parts;
  return whole && step < 1 ? { max: Math.max(1, Math.ceil(max)), step: 1 } : { max: top * e, step };
}

function figure(id, caption, chart, legend) {
  return h('figure', { class: 'chart', id }, h('figcaption', {}, caption), chart, legend || null);
}

function legendList(items) {
  return h('ul', { class: 'legend' }, items.map(([cls, label]) => h('li', {}, h('span', { class: 'swatch ' + cls, 'aria-hidden': 'true' }), label)));
}

function clock(t, long) {
  const d = new Date(t * 1000);
  const p = n => String(n).padStart(2, '0');
  const hm = `${p(d.getHours())}:${p(d.getMinutes())}`;
  return long ? `${p(d.getMonth() + 1)}-${p(d.getDate())} ${hm}` : hm;
}

// Colour classes of the lines, in order; the folded rest is grey.
const LINE_COLOURS = 8;

const METRICS = {
  fallback_rate: { label: 'Fallback rate', rate: true, of: p => p.series.fallbacks },
  error_rate: { label: 'Error rate', rate: true, of: p => p.series.errors },
  host_switches: { label: 'Host switches per bucket', rate: false, of: p => p.series.host_switches },
};

// One line per carrier and region over the buckets of /admin/v1/events/series, with the
// alert level as a dashed line on the rates. Buckets without requests have no rate: a gap.
function eventsChart(v, metric) {
  const m = METRICS[metric] || METRICS.fallback_rate;
  const t = v.t || [];
  const lines = (v.places || []).map((p, i) => ({ p, name: `${p.isp}/${p.region}`, cls: 'k' + (i % LINE_COLOURS) }));
  if (v.others) lines.push({ p: v.others, name: `others (${v.others.places} places)`, cls: 'kx' });
  for (const l of lines) {
    const num = m.of(l.p) || [];
    l.values = num.map((n, i) => m.rate ? (l.p.series.requests[i] > 0 ? n / l.p.series.requests[i] : null) : n);
  }
  if (!t.length || !lines.length) return h('p', { class: 'muted', id: 'events-chart' }, 'No events in this window to chart.');
  const W = 760, H = 300, L = 56, R = 16, T = 14, B = 40;
  const peak = Math.max(0, ...lines.flatMap(l => l.values.filter(x => x !== null)));
  const scale = niceScale(m.rate ? Math.max(peak, v.alert_rate * 1.5) : Math.max(peak, 1), !m.rate);
  const step = v.step_s || 60;
  const t0 = t[0], t1 = t[t.length - 1] + step;
  // A bucket's point is at its middle.
  const x = ts => L + (ts + step / 2 - t0) / (t1 - t0) * (W - L - R);
  const y = val => T + (1 - val / scale.max) * (H - T - B);
  const label = val => m.rate ? fmt(val * 100, 2) + '%' : fmt(val, 1);
  const parts = [];
  for (let val = 0; val <= scale.max + scale.step / 2; val += scale.step) {
    parts.push(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(val), y2: y(val) }),
      svg('text', { class: 'tick', x: L - 6, y: y(val) + 4, 'text-anchor': 'end' }, label(val)));
  }
  const long = t1 - t0 > 86400;
  const every = Math.max(1, Math.ceil(t.length / 6));
  t.forEach((ts, i) => {
    if (i % every) return;
    parts.push(svg('line', { class: 'axis', x1: x(ts), x2: x(ts), y1: H - B, y2: H - B + 4 }),
      svg('text', { class: 'tick', x: x(ts), y: H - B + 16, 'text-anchor': 'middle' }, clock(ts, long)));
  });
  parts.push(svg('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }),
    svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }),
    svg('text', { class: 'tick', x: W - R, y: H - 4, 'text-anchor': 'end' }, `bucket ${fmt(step / 60, 0)} min`));
  if (m.rate) {
    parts.push(svg('line', { class: 'threshold', x1: L, x2: W - R, y1: y(v.alert_rate), y2: y(v.alert_rate) }, tip(`alert level ${pct(v.alert_rate)}`)),
      svg('text', { class: 'threshold-label', x: W - R - 4, y: y(v.alert_rate) - 4, 'text-anchor': 'end' }, `alert ${pct(v.alert_rate)}`));
  }
  for (const l of lines) {
    let d = '';
    let open = false;
    const dots = [];
    l.values.forEach((val, i) => {
      if (val === null) { open = false; return; }
      d += `${open ? 'L' : 'M'}${x(t[i]).toFixed(1)},${y(val).toFixed(1)}`;
      // A point with no neighbour draws no segment: a dot shows it.
      const alone = (i === 0 || l.values[i - 1] === null) && (i === l.values.length - 1 || l.values[i + 1] === null);
      if (alone) dots.push(svg('circle', { class: 'dot ' + l.cls, cx: x(t[i]).toFixed(1), cy: y(val).toFixed(1), r: 3.5 }, tip(`${l.name} ${clock(t[i], long)}: ${label(val)}`)));
      open = true;
    });
    parts.push(svg('path', { class: 'line ' + l.cls, d, 'data-place': l.name }, tip(l.name)), ...dots);
  }
  const chart = svg('svg', { class: 'events-chart', viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': `${m.label} per carrier and region, ${lines.length} lines` }, parts);
  const legend = legendList(lines.map(l => [l.cls, `${l.name}: ${fmt(l.p.requests, 0)} requests`]).concat(m.rate ? [['threshold-swatch', `alert level ${pct(v.alert_rate)}`]] : []));
  return figure('events-chart', `${m.label} over time by carrier and region (top ${v.places.length} by events${v.others ? ', the rest folded' : ''})`, chart, legend);
}

// China's provinces as a tile grid, each roughly where it lies: [token, label, column, row].
// Tokens are the GeoIP subdivision names folded (docs/scheduling.md); a few have aliases.
const PROVINCES = [
  ['innermongolia', 'Inner Mong.', 5, 0], ['heilongjiang', 'Heilongjiang', 8, 0],
  ['xinjiang', 'Xinjiang', 0, 1], ['gansu', 'Gansu', 3, 1], ['ningxia', 'Ningxia', 4, 1], ['beijing', 'Beijing', 6, 1], ['liaoning', 'Liaoning', 7, 1], ['jilin', 'Jilin', 8, 1],
  ['qinghai', 'Qinghai', 2, 2], ['shaanxi', 'Shaanxi', 4, 2], ['shanxi', 'Shanxi', 5, 2], ['hebei', 'Hebei', 6, 2], ['tianjin', 'Tianjin', 7, 2],
  ['tibet', 'Tibet', 1, 3], ['sichuan', 'Sichuan', 3, 3], ['chongqing', 'Chongqing', 4, 3], ['henan', 'Henan', 5, 3], ['shandong', 'Shandong', 6, 3], ['jiangsu', 'Jiangsu', 7, 3],
  ['yunnan', 'Yunnan', 3, 4], ['guizhou', 'Guizhou', 4, 4], ['hubei', 'Hubei', 5, 4], ['anhui', 'Anhui', 6, 4], ['zhejiang', 'Zhejiang', 7, 4], ['shanghai', 'Shanghai', 8, 4],
  ['guangxi', 'Guangxi', 4, 5], ['hunan', 'Hunan', 5, 5], ['jiangxi', 'Jiangxi', 6, 5], ['fujian', 'Fujian', 7, 5], ['taiwan', 'Taiwan', 8, 5],
  ['guangdong', 'Guangdong', 5, 6], ['hongkong', 'Hong Kong', 6, 6],
  ['hainan', 'Hainan', 4, 7], ['macau', 'Macau', 5, 7],
];
const REGION_ALIASES = {
  neimenggu: 'innermongolia', neimongol: 'innermongolia', xizang: 'tibet', hk: 'hongkong', mo: 'macau', macao: 'macau', tw: 'taiwan',
  guangxizhuangautonomousregion: 'guangxi', ningxiahuiautonomousregion: 'ningxia', xinjianguygurautonomousregion: 'xinjiang',
  xinjianguyghurautonomousregion: 'xinjiang', tibetautonomousregion: 'tibet', innermongoliaautonomousregion: 'innermongolia',
};

const VERDICT_METRICS = {
  wrong: { label: 'Wrong answers (hijacked, cross-carrier, stale, invalid)', of: c => c.hijacked + c.cross_carrier + c.stale + c.invalid },
  hijacked: { label: 'Hijacked', of: c => c.hijacked },
  cross_carrier: { label: 'Cross-carrier', of: c => c.cross_carrier },
};
// Colour steps of a rate: [class, upper bound (exclusive), legend].
const RATE_STEPS = [['r0', 1e-9, '0%'], ['r1', 0.01, 'under 1%'], ['r2', 0.05, '1–5%'], ['r3', 0.2, '5–20%'], ['r4', Infinity, '20% or more']];
const rateClass = r => (RATE_STEPS.find(([, top]) => r < top) || RATE_STEPS[RATE_STEPS.length - 1])[0];

// The LocalDNS map as a map: a tile per province coloured by the share of bad answers there
// (every carrier, or one), and a strip for regions the layout does not place.
function localdnsMap(rows, isp, metric) {
  const m = VERDICT_METRICS[metric] || VERDICT_METRICS.wrong;
  const known = new Set(PROVINCES.map(p => p[0]));
  const by = new Map();
  for (const r of rows) {
    if (isp && r.isp !== isp) continue;
    const key = REGION_ALIASES[r.region] || r.region;
    const c = by.get(key) || { reports: 0, consistent: 0, hijacked: 0, cross_carrier: 0, stale: 0, invalid: 0, unverified: 0, isps: [] };
    for (const k of ['reports', 'consistent', 'hijacked', 'cross_carrier', 'stale', 'invalid', 'unverified']) c[k] += r[k] || 0;
    c.isps.push(r.isp);
    by.set(key, c);
  }
  const others = [...by.keys()].filter(k => !known.has(k)).sort();
  const TW = 76, TH = 48, G = 4, cols = 9;
  const tile = (key, label, cx, cy, extra) => {
    const c = by.get(key);
    const rate = c && c.reports > 0 ? m.of(c) / c.reports : null;
    const cls = `tile ${rate === null ? 'rn' : rateClass(rate) + ' has-data'}${extra ? ' ' + extra : ''}`;
    const desc = rate === null ? `${label}: no reports` : `${label}: ${pct(rate)} of ${fmt(c.reports, 1)} reports (${[...new Set(c.isps)].join(', ')})`;
    return svg('g', { class: cls, 'data-region': key, 'data-rate': rate === null ? null : rate.toFixed(4) }, tip(desc),
      svg('rect', { x: cx, y: cy, width: TW, height: TH, rx: 4 }),
      svg('text', { x: cx + TW / 2, y: cy + 19, 'text-anchor': 'middle' }, label),
      svg('text', { class: 'val', x: cx + TW / 2, y: cy + 35, 'text-anchor': 'middle' }, rate === null ? '–' : pct(rate)));
  };
  const parts = PROVINCES.map(([key, label, col, row]) => tile(key, label, 8 + col * (TW + G), 8 + row * (TH + G)));
  let height = 8 + 8 * (TH + G) + 4;
  if (others.length) {
    parts.push(svg('text', { class: 'strip-label', x: 8, y: height + 14 }, 'Other regions (not on the map)'));
    height += 22;
    others.forEach((key, i) => parts.push(tile(key, key.length > 12 ? key.slice(0, 11) + '…' : key, 8 + (i % cols) * (TW + G), height + Math.floor(i / cols) * (TH + G), 'other')));
    height += Math.ceil(others.length / cols) * (TH + G);
  }
  const W = 8 + cols * (TW + G) + 4;
  const placed = [...by.keys()].filter(k => known.has(k)).length;
  const chart = svg('svg', { class: 'localdns-map', viewBox: `0 0 ${W} ${height + 4}`, role: 'img',
    'aria-label': `${m.label} by region: ${placed} regions on the map, ${others.length} other` }, parts);
  return figure('localdns-map', `${m.label} by region${isp ? ', carrier ' + isp : ', every carrier'}`, chart,
    legendList(RATE_STEPS.map(([cls, , label]) => [cls, label]).concat([['rn', 'no reports']])));
}

// Hits, misses and errors per mirror rule since start: a group of three bars each.
const MIRROR_BARS = [['hits', 'Hits', 'b-hit'], ['misses', 'Misses', 'b-miss'], ['errors', 'Errors', 'b-err']];
const MIRROR_RULES_CHARTED = 30;

function mirrorChart(rules) {
  const shown = rules.slice().sort((a, b) => b.requests - a.requests).slice(0, MIRROR_RULES_CHARTED);
  if (!shown.length) return h('p', { class: 'muted', id: 'mirror-chart' }, 'No rules to chart.');
  const W = 760, L = 150, R = 70, BAR = 12, GAP = 2, BAND = MIRROR_BARS.length * (BAR + GAP) + 12, T = 8;
  const H = T + shown.length * BAND + 26;
  const scale = niceScale(Math.max(1, ...shown.flatMap(r => MIRROR_BARS.map(([k]) => r[k] || 0))), true);
  const x = v => L + v / scale.max * (W - L - R);
  const parts = [];
  for (let v = 0; v <= scale.max + scale.step / 2; v += scale.step) {
    parts.push(svg('line', { class: 'grid', x1: x(v), x2: x(v), y1: T, y2: H - 22 }),
      svg('text', { class: 'tick', x: x(v), y: H - 8, 'text-anchor': 'middle' }, fmt(v, 0)));
  }
  shown.forEach((r, i) => {
    const top = T + i * BAND;
    const name = r.path_prefix.length > 22 ? r.path_prefix.slice(0, 21) + '…' : r.path_prefix;
    parts.push(svg('text', { class: 'rule-label', x: L - 8, y: top + BAND / 2, 'text-anchor': 'end' }, tip(`${r.rule}: ${r.path_prefix}`), name));
    MIRROR_BARS.forEach(([k, label, cls], j) => {
      const v = r[k] || 0;
      const y0 = top + j * (BAR + GAP);
      // A zero still shows as a hairline, so an empty bar is visibly zero, not missing.
      parts.push(svg('rect', { class: 'bar ' + cls, x: L, y: y0, width: Math.max(1, x(v) - L).toFixed(1), height: BAR, 'data-rule': r.rule, 'data-kind': k, 'data-value': v },
        tip(`${r.path_prefix} ${label.toLowerCase()}: ${fmt(v, 0)}`)),
      svg('text', { class: 'tick', x: Math.max(1, x(v)) + 4, y: y0 + BAR - 2 }, fmt(v, 0)));
    });
  });
  parts.push(svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - 22 }));
  const chart = svg('svg', { class: 'mirror-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `Hits, misses and errors of ${shown.length} rules` }, parts);
  return figure('mirror-chart', `Hits, misses and errors per rule since start${rules.length > shown.length ? ` (the ${shown.length} busiest of ${rules.length})` : ''}`, chart,
    legendList(MIRROR_BARS.map(([, label, cls]) => [cls, label])));
}

// ---- per-domain figures ------------------------------------------------------------------

// One domain's questions over the last hour on this server: a bar per minute, and tables by
// front-end and by carrier and region (GET /admin/v1/domains/{name}/stats).
async function domainFigures(name, into) {
  const res = await api('GET', `/admin/v1/domains/${encodeURIComponent(name)}/stats?window=1h`);
  if (!res.ok) { into.replaceChildren(h('p', { class: 'error' }, (res.json && res.json.error) || res.text)); return; }
  const st = res.json;
  const fronts = Object.entries(st.by_frontend).map(([frontend, queries]) => ({ frontend, queries }));
  into.replaceChildren(h('section', { class: 'figures', 'aria-label': 'Figures of ' + name },
    h('h2', {}, `${name}: ${fmt(st.total, 0)} questions in the last hour (this server)`),
    domainChart(st),
    table(fronts, [['frontend', 'Front-end'], ['queries', 'Questions']], 'By front-end'),
    table(st.by_place, [['isp', 'Carrier'], ['region', 'Region'], ['queries', 'Questions']], 'By carrier and region'),
    h('button', { type: 'button', class: 'secondary', onclick: () => into.replaceChildren() }, 'Close')));
}

function domainChart(st) {
  if (!st.series.length) return h('p', { class: 'muted', id: 'domain-chart' }, 'No questions in this window to chart.');
  const W = 760, H = 180, L = 44, R = 8, T = 8, B = 22, MINUTES = 60;
  const last = Math.max(...st.series.map(m => m.at));
  const first = last - (MINUTES - 1) * 60;
  const scale = niceScale(Math.max(...st.series.map(m => m.queries)), true);
  const slot = (W - L - R) / MINUTES;
  const y = v => H - B - v / scale.max * (H - B - T);
  const parts = [];
  for (let v = 0; v <= scale.max + scale.step / 2; v += scale.step) {
    parts.push(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }),
      svg('text', { class: 'tick', x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, fmt(v, 0)));
  }
  for (const m of st.series.filter(m => m.at >= first)) {
    const x = L + (m.at - first) / 60 * slot;
    parts.push(svg('rect', { class: 'bar b-miss', x: x.toFixed(1), y: y(m.queries).toFixed(1), width: Math.max(1, slot - 2).toFixed(1), height: Math.max(1, H - B - y(m.queries)).toFixed(1), 'data-at': m.at, 'data-value': m.queries },
      tip(`${clock(m.at)}: ${fmt(m.queries, 0)} questions`)));
  }
  parts.push(svg('text', { class: 'tick', x: L, y: H - 6 }, clock(first)), svg('text', { class: 'tick', x: W - R, y: H - 6, 'text-anchor': 'end' }, clock(last)),
    svg('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
  const chart = svg('svg', { class: 'domain-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `Questions per minute, ${st.series.length} minutes with questions` }, parts);
  return figure('domain-chart', 'Questions per minute, last hour', chart);
}

// ---- events and the LocalDNS map ---------------------------------------------------------

function windowPicker(current, go) {
  return h('label', {}, 'Window', h('select', { name: 'window', onchange: ev => go(ev.target.value) },
    ['5m', '15m', '1h', '6h', '1d', '7d'].map(w => h('option', { value: w, selected: w === current ? true : null }, w))));
}

async function eventsPage(win, metric) {
  win = win || '5m';
  metric = METRICS[metric] ? metric : 'fallback_rate';
  const [res, ser] = await Promise.all([
    api('GET', '/admin/v1/events/summary?window=' + encodeURIComponent(win)),
    api('GET', `/admin/v1/events/series?window=${encodeURIComponent(win)}&top=${LINE_COLOURS}`),
  ]);
  const v = res.json || {};
  const go = (w, m) => { location.hash = `#/events/${w}/${m}`; };
  const pickMetric = h('label', {}, 'Chart', h('select', { name: 'metric', onchange: ev => go(win, ev.target.value) },
    Object.entries(METRICS).map(([k, m]) => h('option', { value: k, selected: k === metric ? true : null }, m.label))));
  page('Client events', h('div', { class: 'row' }, windowPicker(win, w => go(w, metric)), pickMetric),
    res.ok ? h('p', { class: 'muted' }, `${v.replicas} replica(s) reporting; a place is flagged past ${pct(v.alert_rate)} of at least ${v.alert_min_requests} requests.`) : h('p', { class: 'error' }, (v && v.error) || res.text),
    ser.ok ? eventsChart(ser.json, metric) : h('p', { class: 'error' }, (ser.json && ser.json.error) || ser.text),
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
  const rows = v.map || [];
  const isps = [...new Set(rows.map(r => r.isp))].sort();
  const mapBox = h('div', {});
  const carrier = h('select', { name: 'isp' }, h('option', { value: '' }, 'every carrier'), isps.map(i => h('option', { value: i }, i)));
  const metric = h('select', { name: 'verdict' }, Object.entries(VERDICT_METRICS).map(([k, m]) => h('option', { value: k }, m.label)));
  const draw = () => mapBox.replaceChildren(localdnsMap(rows, carrier.value, metric.value));
  carrier.addEventListener('change', draw);
  metric.addEventListener('change', draw);
  draw();
  page('LocalDNS map', h('div', { class: 'row' }, windowPicker(win, w => { location.hash = '#/localdns/' + w; }),
    h('label', {}, 'Carrier', carrier), h('label', {}, 'Colour by', metric)),
    res.ok ? null : h('p', { class: 'error' }, (v && v.error) || res.text),
    h('p', { class: 'muted' }, 'Sampled system-resolver answers beside HTTPDNS\'s, judged by this service: worst places first.'),
    mapBox,
    h('h2', {}, 'By carrier and region'),
    table(rows, [['isp', 'Carrier'], ['region', 'Region'], ['reports', 'Reports'], ['consistent', 'Consistent'],
      ['hijacked_rate', 'Hijacked', r => pct(r.hijacked_rate)], ['cross_carrier_rate', 'Cross-carrier', r => pct(r.cross_carrier_rate)],
      ['stale_rate', 'Stale', r => pct(r.stale_rate)], ['invalid_rate', 'Invalid', r => pct(r.invalid_rate)], ['unverified_rate', 'Unverified', r => pct(r.unverified_rate)]]));
}

// ---- routing ----------------------------------------------------------------------------

async function route() {
  // Only `#/...` is a page: `#main` (the skip link) moves focus, nothing else.
  if (location.hash && !location.hash.startsWith('#/')) return;
  clearPoll();
  const gen = ++S.gen;
  let name, arg, arg2, arg3;
  try {
    [name, arg, arg2, arg3] = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
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
      case 'events': return await eventsPage(arg, arg2);
      case 'localdns': return await localdnsPage(arg);
      case 'policy': return await policyPage(arg, arg2, arg3);
      case 'audit': return await auditPage(arg);
      case 'tokens': return await tokensPage();
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
  if (who.ok) { S.csrf = who.json.csrf; S.role = who.json.role; S.name = who.json.name; signedIn(); }
  route();
}

document.addEventListener('DOMContentLoaded', start);
