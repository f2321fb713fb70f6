'use strict';
// The policy page (docs/policy.md): every place the controller knows, its state and steps, and
// for one place a chart of its cohorts' failure rates over time with the threshold, and the
// share of httpdnsRate it held. Loaded after app.js, whose helpers it uses; app.js routes
// `#/policy[/isp/region]` here.

const POLICY_STATES = { healthy: 'ok', degraded: 'bad', recovering: 'warn' };

function stateBadge(s) {
  return h('span', { class: 'badge ' + (POLICY_STATES[s] || ''), 'data-state': s }, s);
}

// Lines of one place: the ramped cohort (on), the held-back one (off), devices that do not
// say (unknown); failure rate per bucket, a gap where a bucket had no requests. Below it, the
// share of httpdnsRate in force as a step line.
function policyChart(v) {
  const t = v.t || [];
  const cohorts = [['on', 'on HTTPDNS (ramped)', 'k0'], ['off', 'held back (LocalDNS)', 'k1'], ['unknown', 'side unknown', 'k2']];
  const lines = cohorts.map(([k, name, cls]) => ({ name, cls, values: v[k].failure_rate, requests: v[k].requests.reduce((a, b) => a + b, 0) }))
    .filter(l => l.requests > 0);
  if (!t.length) return h('p', { class: 'muted', id: 'policy-chart' }, 'No figures in this window.');
  const W = 760, H = 260, L = 56, R = 16, T = 14, B = 40, SH = 90;
  const step = v.step_s || 60;
  const t0 = t[0], t1 = t[t.length - 1] + step;
  const x = ts => L + Math.min(Math.max((ts - t0) / (t1 - t0), 0), 1) * (W - L - R);
  const peak = Math.max(v.threshold || 0, ...lines.flatMap(l => l.values.filter(x => x !== null)));
  const scale = niceScale(Math.max(peak * 1.2, 0.01));
  const y = val => T + (1 - val / scale.max) * (H - T - B);
  const parts = [];
  for (let val = 0; val <= scale.max + scale.step / 2; val += scale.step) {
    parts.push(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(val), y2: y(val) }),
      svg('text', { class: 'tick', x: L - 6, y: y(val) + 4, 'text-anchor': 'end' }, fmt(val * 100, 1) + '%'));
  }
  const every = Math.max(1, Math.ceil(t.length / 6));
  t.forEach((ts, i) => {
    if (i % every) return;
    parts.push(svg('text', { class: 'tick', x: x(ts + step / 2), y: H - B + 16, 'text-anchor': 'middle' }, clock(ts)));
  });
  parts.push(svg('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }), svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
  if (typeof v.threshold === 'number') {
    parts.push(svg('line', { class: 'threshold', x1: L, x2: W - R, y1: y(v.threshold), y2: y(v.threshold) }, tip(`threshold ${pct(v.threshold)}`)));
  }
  for (const l of lines) {
    let d = '';
    let open = false;
    l.values.forEach((val, i) => {
      if (val === null) { open = false; return; }
      d += `${open ? 'L' : 'M'}${x(t[i] + step / 2).toFixed(1)},${y(val).toFixed(1)}`;
      open = true;
    });
    parts.push(svg('path', { class: 'line ' + l.cls, d, 'data-cohort': l.name }, tip(l.name)));
  }
  const rates = svg('svg', { class: 'policy-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `Failure rate by cohort of ${v.isp}/${v.region}` }, parts);
  // The share: a step line from each change to the next.
  const sy = s => 8 + (1 - s) * (SH - 24);
  const sp = [svg('line', { class: 'axis', x1: L, x2: W - R, y1: sy(0), y2: sy(0) }),
    svg('text', { class: 'tick', x: L - 6, y: sy(1) + 4, 'text-anchor': 'end' }, '100%'),
    svg('text', { class: 'tick', x: L - 6, y: sy(0) + 4, 'text-anchor': 'end' }, '0%')];
  let d = '';
  (v.shares || []).forEach((s, i, all) => {
    const end = i + 1 < all.length ? all[i + 1].at_s : t1;
    d += `${i ? 'L' : 'M'}${x(s.at_s).toFixed(1)},${sy(s.share).toFixed(1)}L${x(end).toFixed(1)},${sy(s.share).toFixed(1)}`;
  });
  sp.push(svg('path', { class: 'line k3 share', d }, tip('share of httpdnsRate in force')));
  const share = svg('svg', { class: 'policy-share', viewBox: `0 0 ${W} ${SH}`, role: 'img', 'aria-label': 'Share of httpdnsRate in force' }, sp);
  const legend = legendList(lines.map(l => [l.cls, `${l.name}: ${fmt(l.requests, 0)} requests`])
    .concat([['threshold-swatch', `threshold ${pct(v.threshold)}`], ['k3', 'share of httpdnsRate in force']]));
  return figure('policy-chart', `${v.isp}/${v.region}: failure rate by cohort (bucket ${fmt(step / 60, 0)} min), and the share in force`, h('div', {}, rates, share), legend);
}

async function policyPage(isp, region, win) {
  win = win || '1h';
  const res = await api('GET', '/admin/v1/policy/places');
  const v = res.json || {};
  const places = v.places || [];
  // The place shown: the one asked for, else the first not healthy, else the first.
  const chosen = places.find(p => p.isp === isp && p.region === region) || places.find(p => p.state !== 'healthy') || places[0];
  const go = (p, w) => { location.hash = `#/policy/${encodeURIComponent(p.isp)}/${encodeURIComponent(p.region)}/${w}`; };
  let detail = null;
  if (chosen) {
    const ser = await api('GET', `/admin/v1/policy/series?isp=${encodeURIComponent(chosen.isp)}&region=${encodeURIComponent(chosen.region)}&window=${encodeURIComponent(win)}`);
    detail = h('section', { id: 'policy-place' },
      h('h2', {}, `${chosen.isp}/${chosen.region} `, stateBadge(chosen.state)),
      h('div', { class: 'row' }, windowPicker(win, w => go(chosen, w))),
      ser.ok ? policyChart(ser.json) : h('p', { class: 'error' }, (ser.json && ser.json.error) || ser.text),
      h('h3', {}, 'Steps'),
      table(chosen.steps || [], [['at_ms', 'When', s => new Date(s.at_ms).toLocaleString()], ['from', 'From'], ['to', 'To', s => stateBadge(s.to)],
        ['to_share', 'Share', s => pct(s.to_share)], ['why', 'Why'], ['versions', 'Config versions', s => (s.versions || []).join(', ')]], 'Newest first'));
  }
  const figures = p => p.rates && p.rates.on ? `${pct(p.rates.on.failure_rate)} of ${fmt(p.rates.on.requests, 0)} / ${pct(p.rates.off.failure_rate)} of ${fmt(p.rates.off.requests, 0)}` : '–';
  page('Resolution policy',
    res.ok ? h('p', { class: 'muted' }, v.auto
      ? `The controller decides every ${fmt(v.tick_ms / 1000, 1)} s on ${v.min_requests} requests; recovery ramp ${v.ramp.map(pct).join(' → ')}, each step held ${v.step_seconds} s.`
      : 'The controller is off (HTTPDNS_POLICY_AUTO=false): every place follows the config document.') : h('p', { class: 'error' }, (v && v.error) || res.text),
    places.length ? table(places, [
      ['isp', 'Carrier', p => h('a', { href: `#/policy/${encodeURIComponent(p.isp)}/${encodeURIComponent(p.region)}/${win}` }, p.isp)], ['region', 'Region'],
      ['state', 'State', p => stateBadge(p.state)], ['share', 'Share', p => pct(p.share)],
      ['httpdns_rate', 'httpdnsRate by module', p => Object.entries(p.httpdns_rate || {}).map(([m, r]) => `${m} ${pct(r)}`).join(', ') || '–'],
      ['pinned_in', 'Pinned in', p => (p.pinned_in || []).join(', ') || '–'], ['threshold', 'Threshold', p => pct(p.threshold)],
      ['rates', 'Failure: on / held back', figures], ['steps', 'Steps', p => String((p.steps || []).length)]], 'Places')
      : h('p', { class: 'muted' }, 'No place has reported events yet.'),
    detail);
}
