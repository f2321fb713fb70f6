// The admin console in a real browser (Debian's chromium through playwright-core), against a
// running httpdns that tests/integration/console.rs started and seeded. Every step asserts;
// the first failure exits non-zero with what was seen. Screenshots of each page, and of each
// chart on its own (events-chart, localdns-map, mirror-chart), go to SHOTS.
//
//   BASE=http://127.0.0.1:PORT TOKEN=... SHOTS=dir node console.mjs
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';

const BASE = process.env.BASE;
const TOKEN = process.env.TOKEN;
const SHOTS = process.env.SHOTS;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
if (!BASE || !TOKEN || !SHOTS) throw new Error('BASE, TOKEN and SHOTS are required');
mkdirSync(SHOTS, { recursive: true });

function check(ok, what) {
  if (!ok) throw new Error('FAILED: ' + what);
  console.log('ok - ' + what);
}

async function until(what, fn, ms = 5000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await new Promise(r => setTimeout(r, 100));
  }
  throw new Error('FAILED (timed out): ' + what + '; last: ' + JSON.stringify(last));
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
const page = await context.newPage();
const errors = [];
page.on('pageerror', e => errors.push(String(e)));
// The browser logs every non-2xx fetch as an error; the refusals asked for here are expected.
page.on('console', m => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text()); });
page.on('dialog', d => d.accept());
const shot = name => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
const api = context.request;
const d = async () => (await (await api.get(`${BASE}/d?dn=www.example.com&ip=1.0.2.7`)).text()).trim();

try {
  // Without a session the admin API is closed, and the page says so by asking to sign in.
  check((await api.get(`${BASE}/admin/v1/nodes`)).status() === 401, 'the admin API refuses a request without a session');
  const first = await page.goto(`${BASE}/console`);
  const csp = first.headers()['content-security-policy'] || '';
  check(csp.includes("script-src 'self'") && csp.includes("frame-ancestors 'none'"), 'the page is served with a strict CSP: ' + csp);
  await page.waitForSelector('#signin');
  check(await page.isHidden('#nav') && !(await page.textContent('main')).includes('null'), 'the sign-in page shows no sections and no stray "null"');
  await shot('signin');

  // A wrong token is refused on the field; the right one, typed and sent with Enter, signs in.
  await page.fill('input[name=token]', 'wrong-token-0000000000');
  await page.keyboard.press('Enter');
  await page.waitForSelector('input[name=token][aria-invalid=true]');
  check(true, 'a wrong token is shown on the token field');
  await page.fill('input[name=token]', '');
  await page.keyboard.type(TOKEN);
  await page.keyboard.press('Enter');
  await page.waitForSelector('text=Nodes up');
  const cookie = (await context.cookies()).find(c => c.name === 'httpdns_console');
  check(cookie && cookie.httpOnly && cookie.sameSite === 'Strict' && cookie.expires > Date.now() / 1000, 'an HttpOnly, SameSite=Strict session cookie with an expiry');
  await page.waitForSelector('text=Answers per second by front-end', { timeout: 6000 });

  // A change through the session without its CSRF token, or with a wrong one, is refused.
  const forged = await page.evaluate(async () => {
    const out = [];
    for (const token of [null, 'not-the-token']) {
      const headers = { 'Content-Type': 'application/json' };
      if (token) headers['X-CSRF-Token'] = token;
      const r = await fetch('/admin/v1/nodes/forged', { method: 'PUT', headers, body: JSON.stringify({ ip: '1.1.1.9', pool: 'edge', isp: 'unicom', region: 'shanghai' }) });
      out.push([r.status, (await r.json()).field]);
    }
    return out;
  });
  check(JSON.stringify(forged) === JSON.stringify([[403, 'X-CSRF-Token'], [403, 'X-CSRF-Token']]), 'changes without the CSRF token are refused: ' + JSON.stringify(forged));
  check((await api.get(`${BASE}/admin/v1/nodes/forged`)).status() === 404, 'and nothing was written');

  // A domain, then a node: the API's validation error is shown on the field; /d answers it.
  await page.goto(`${BASE}/console#/domains`);
  await page.click('main > .row button:has-text("Create")');
  await page.fill('input[name=name]', 'www.example.com');
  await page.fill('input[name=pool]', 'edge');
  await page.fill('input[name=ttl]', '60');
  await page.click('form button[type=submit]');
  await page.waitForSelector('td:has-text("www.example.com")');
  await shot('domains');

  await page.goto(`${BASE}/console#/nodes`);
  await page.click('main > .row button:has-text("Create")');
  await page.fill('input[name=name]', 'edge-1');
  await page.fill('input[name=ip]', 'not-an-ip');
  await page.fill('input[name=pool]', 'edge');
  await page.fill('input[name=isp]', 'unicom');
  await page.fill('input[name=region]', 'shanghai');
  await page.click('form button[type=submit]');
  await page.waitForSelector('input[name=ip][aria-invalid=true]');
  const shown = await page.textContent('.field-error');
  check(/ip/.test(shown), 'the invalid address is reported on the ip field: ' + shown);
  await page.fill('input[name=ip]', '1.1.1.1');
  await page.click('form button[type=submit]');
  await page.waitForSelector('td:has-text("edge-1")');
  await until('/d answers the new node', async () => (await d()).includes('1.1.1.1'));
  await page.click('main > .row button:has-text("Create")');
  await page.fill('input[name=name]', 'edge-1');
  await page.fill('input[name=ip]', '1.1.1.2');
  await page.fill('input[name=pool]', 'edge');
  await page.fill('input[name=isp]', 'unicom');
  await page.fill('input[name=region]', 'shanghai');
  await page.click('form button[type=submit]');
  await page.waitForSelector('input[name=name][aria-invalid=true]');
  check((await page.textContent('.field-error')).includes('already exists') && !(await d()).includes('1.1.1.2'), 'creating an existing node is refused on its name, nothing replaced');
  await page.click('form button:has-text("Cancel")');
  check(true, 'the node created in the page is in /d');
  await page.fill('input[type=search]', 'edge-1');
  await until('the filter shows one row', async () => (await page.locator('tbody tr').count()) === 1);
  await shot('nodes');

  // Disabled in the page: it leaves /d.
  await page.click('tr:has-text("edge-1") >> text=Disable');
  await page.waitForSelector('tr:has-text("edge-1") >> text=Enable');
  await until('/d no longer answers the disabled node', async () => !(await d()).includes('1.1.1.1'));
  check(true, 'the node disabled in the page left /d');
  await page.click('tr:has-text("edge-1") >> text=Enable');
  await page.waitForSelector('tr:has-text("edge-1") >> text=Disable');

  // The domain's figures: the questions /d was just asked, charted per minute.
  await page.goto(`${BASE}/console#/domains`);
  await page.click('button[aria-label="Figures of www.example.com"]');
  await page.waitForSelector('#domain-chart svg.domain-chart rect.bar');
  const asked = await page.$$eval('#domain-chart rect.bar', rs => rs.reduce((n, r) => n + Number(r.dataset.value), 0));
  check(asked > 0 && (await page.textContent('section.figures h2')).includes(`${asked} questions`), 'the domain figures chart the questions of /d: ' + asked);
  check((await page.textContent('section.figures')).includes('d'), 'and count them by front-end');
  await page.locator('#domain-chart').screenshot({ path: `${SHOTS}/domain-chart.png` });

  await page.goto(`${BASE}/console#/pools`);
  await page.waitForSelector('td:has-text("edge")');
  await shot('pools');

  // Explain: by carrier and region, the same ranking as /d.
  await page.goto(`${BASE}/console#/explain`);
  await page.fill('input[name=dn]', 'www.example.com');
  await page.fill('input[name=isp]', 'unicom');
  await page.fill('input[name=region]', 'shanghai');
  await page.click('button:has-text("Explain")');
  await page.waitForSelector('text=carrier unicom, region shanghai');
  check((await page.textContent('main')).includes('1.1.1.1'), 'the explanation lists the node');
  check((await page.textContent('p.decided')).includes("Pool edge, chosen by the domain's pool"), 'and says what chose the pool');
  await shot('explain');

  // Config: publish, change, roll back; a concurrent publish is shown, not overwritten.
  await page.goto(`${BASE}/console#/config/cdn`);
  await page.waitForSelector('text=Publish the first version');
  await page.click('button:has-text("Publish the first version")');
  await page.waitForSelector('text=Current version 1.');
  const doc = JSON.parse(await page.inputValue('textarea'));
  doc.hostListConfig[0].rate = 0.5;
  await page.fill('textarea', JSON.stringify(doc, null, 2));
  await page.click('text=Preview difference');
  await page.waitForSelector('pre.diff .add');
  check((await page.textContent('pre.diff')).includes('"rate": 0.5'), 'the preview shows the change');
  await page.click('text=Dry run');
  await page.waitForSelector('text=Valid.');
  await page.click('button:has-text("Publish over version 1")');
  await page.waitForSelector('text=Current version 2.');
  const served = async () => (await (await api.get(`${BASE}/app/config-center/module-config?module=cdn`)).json());
  check((await served()).hostListConfig[0].rate === 0.5, 'apps get the published rate');
  await page.click('text=Roll back to v1');
  await page.waitForSelector('text=Current version 3.');
  const back = await served();
  check(back.configVersion === 3 && back.hostListConfig[0].rate === 1, 'rolled back: version 3 with version 1\'s content');
  await page.selectOption('select[aria-label="From version"]', '2');
  await page.selectOption('select[aria-label="To version"]', '3');
  await page.click('button:has-text("Compare")');
  await page.waitForSelector('pre.diff .del');
  await shot('config');
  // Someone else publishes while this page shows version 3.
  const other = await api.put(`${BASE}/admin/v1/config/cdn`, {
    headers: { Authorization: `Bearer ${TOKEN}`, 'If-Match': '"3"', 'Content-Type': 'application/json' },
    data: JSON.stringify(Object.assign({}, back, { configRequestInterval: 300000 })),
  });
  check(other.status() === 200 || other.status() === 201, 'a concurrent publish through the API: ' + other.status());
  await page.fill('textarea', JSON.stringify(Object.assign({}, back, { reviveProbeInterval: 300000 }), null, 2));
  await page.click('button:has-text("Publish over version 3")');
  await page.waitForSelector('text=Someone published meanwhile');
  check((await served()).configRequestInterval === 300000 && (await page.inputValue('textarea')).includes('300000'), 'the concurrent edit is shown, not overwritten, and the text is kept');

  // A guarded rollout armed in the page, then a publish: its state, both sides' chart, actions.
  await page.goto(`${BASE}/console#/overview`);
  await page.goto(`${BASE}/console#/config/cdn`);
  await page.waitForSelector('button:has-text("Arm for the next publish")');
  await page.click('button:has-text("Arm for the next publish")');
  await page.waitForSelector('text=/State running/');
  const armed = await api.put(`${BASE}/admin/v1/config/cdn`, {
    headers: { Authorization: `Bearer ${TOKEN}`, 'If-Match': '*', 'Content-Type': 'application/json' },
    data: JSON.stringify(Object.assign({}, await served(), { reviveProbeInterval: 120000 })),
  });
  check(armed.status() === 200, 'a publish under the armed rollout: ' + armed.status());
  await page.goto(`${BASE}/console#/overview`);
  await page.goto(`${BASE}/console#/config/cdn`);
  await page.waitForSelector('#rollout-chart svg.rollout-chart');
  check(await page.locator('main button:has-text("Pause")').count() === 1 && (await page.textContent('main')).includes('of devices on version'),
    'the rollout shows its state, both sides\' chart and its actions');
  await shot('rollout');

  // Mirror: the stored copy is found, purged, and gone.
  await page.goto(`${BASE}/console#/mirror`);
  await page.waitForSelector('text=Traffic per prefix since start');
  await page.fill('form[aria-label="Look up an object"] input[name=path]', '/image/a.txt');
  await page.click('text=Look up');
  await page.waitForSelector('td:has-text("yes")');
  await page.fill('form[aria-label="Purge"] input[name=path]', '/image/a.txt');
  await page.click('button:has-text("Purge")');
  await page.waitForSelector('text=/Purged \\d+ stored cop/');
  await page.click('text=Look up');
  await page.waitForSelector('text=Not stored: /image/a.txt');
  check(true, 'the copy purged in the page is gone');
  // Prefetch fills it again, with a progress bar that reaches its end.
  await page.fill('form[aria-label="Prefetch"] textarea[name=paths]', '/image/a.txt');
  await page.click('button:has-text("Prefetch")');
  await page.waitForSelector('#prefetch-progress >> text=/1 of 1: 1 filled, 0 failed \\(done\\)/');
  const bar = await page.$eval('#prefetch-progress progress', p => [p.value, p.max]);
  check(bar[0] === 1 && bar[1] === 1, 'the prefetch progress bar is full: ' + JSON.stringify(bar));
  await page.click('text=Look up');
  await page.waitForSelector('td:has-text("yes")');
  await shot('mirror');

  // The mirror chart: three bars per rule, each the report's figure (no mirror request was
  // made since the page loaded it).
  const report = await (await api.get(`${BASE}/admin/v1/mirror/report`, { headers: { Authorization: `Bearer ${TOKEN}` } })).json();
  const bars = await page.$$eval('#mirror-chart svg.mirror-chart rect.bar', rs => rs.map(r => [r.dataset.rule, r.dataset.kind, Number(r.dataset.value), Number(r.getAttribute('width'))]));
  check(report.rules.length >= 3 && bars.length === report.rules.length * 3, `the mirror chart has three bars for each of the ${report.rules.length} rules: ${bars.length}`);
  for (const r of report.rules) {
    for (const k of ['hits', 'misses', 'errors']) {
      const bar = bars.find(([rule, kind]) => rule === r.rule && kind === k);
      check(bar && bar[2] === r[k] && bar[3] > 0, `the ${r.rule} ${k} bar shows ${r[k]}: ${JSON.stringify(bar)}`);
    }
  }
  check(bars.some(b => b[1] === 'hits' && b[2] > 0) && bars.some(b => b[1] === 'misses' && b[2] > 0) && bars.some(b => b[1] === 'errors' && b[2] > 0),
    'the mirror chart has hits, misses and errors to show: ' + JSON.stringify(bars));
  await page.locator('#mirror-chart').screenshot({ path: `${SHOTS}/mirror-chart.png` });

  // The events chart: one line per carrier and region the series names (the four places the
  // test posted from among them), each drawn, and the 1% alert line.
  await page.goto(`${BASE}/console#/events/1h`);
  await page.waitForSelector('text=By carrier and region');
  check((await page.textContent('main')).includes('HTTPDNS_TIMEOUT'), 'the events page names the fallback reason');
  await page.waitForSelector('#events-chart svg.events-chart');
  const series = await (await api.get(`${BASE}/admin/v1/events/series?window=1h&top=8`, { headers: { Authorization: `Bearer ${TOKEN}` } })).json();
  const expected = series.places.map(p => `${p.isp}/${p.region}`);
  const lines = await page.$$eval('#events-chart path.line', ps => ps.map(p => [p.dataset.place, (p.getAttribute('d') || '').split(/[ML]/).filter(Boolean).length]));
  check(lines.length === expected.length + (series.others ? 1 : 0) && expected.every((name, i) => lines[i][0] === name),
    `a line per place of the series: ${JSON.stringify(lines)} for ${JSON.stringify(expected)}`);
  for (const place of ['unicom/shanghai', 'telecom/guangdong', 'mobile/beijing', 'unicom/sg']) {
    const line = lines.find(([name]) => name === place);
    check(line && line[1] >= 2, `the ${place} line is drawn through its minutes: ${JSON.stringify(line)}`);
  }
  check(await page.locator('#events-chart line.threshold').count() === 1, 'the chart draws the 1% alert level');
  check((await page.$$eval('#events-chart .legend li', ls => ls.length)) === lines.length + 1, 'a legend entry per line and the alert level');
  await page.locator('#events-chart').screenshot({ path: `${SHOTS}/events-chart.png` });
  await shot('events');
  await page.selectOption('select[name=metric]', 'error_rate');
  await page.waitForSelector('#events-chart figcaption:has-text("Error rate")');
  check(await page.locator('#events-chart path.line').count() === lines.length, 'the error-rate chart has the same lines');

  // The LocalDNS map: a tile per province, coloured where there are reports; regions the map
  // does not place (sg, us) in the strip below it.
  await page.goto(`${BASE}/console#/localdns/1h`);
  await page.waitForSelector('td:has-text("unicom")');
  await page.waitForSelector('#localdns-map svg.localdns-map');
  check(!(await page.textContent('main')).includes('null'), 'no stray "null" on the map page');
  const ldns = await (await api.get(`${BASE}/admin/v1/localdns/map?window=1h`, { headers: { Authorization: `Bearer ${TOKEN}` } })).json();
  const tiles = await page.$$eval('#localdns-map g.tile', gs => gs.map(g => ({ region: g.dataset.region, data: g.classList.contains('has-data'), other: g.classList.contains('other'), rate: g.dataset.rate === undefined ? null : Number(g.dataset.rate), cls: g.getAttribute('class') })));
  const placed = new Set(tiles.filter(t => !t.other).map(t => t.region));
  const regions = [...new Set(ldns.map.map(r => r.region))];
  check(placed.size >= 34, 'the map places every province: ' + placed.size);
  const onMap = tiles.filter(t => t.data && !t.other).map(t => t.region).sort();
  const inStrip = tiles.filter(t => t.other).map(t => t.region).sort();
  check(JSON.stringify(onMap) === JSON.stringify(regions.filter(r => placed.has(r)).sort()), `the provinces with reports are coloured: ${onMap}`);
  check(JSON.stringify(inStrip) === JSON.stringify(regions.filter(r => !placed.has(r)).sort()) && inStrip.includes('sg') && inStrip.includes('us'), `the other regions are in the strip: ${inStrip}`);
  const tileOf = region => tiles.find(t => t.region === region && t.data);
  check(tileOf('guangdong').rate === 0.5 && !tileOf('guangdong').cls.includes('r0') && tileOf('shanghai').rate === 0 && tileOf('shanghai').cls.includes('r0') && tileOf('beijing'),
    'guangdong is coloured by its hijacked half, shanghai as clean: ' + JSON.stringify([tileOf('guangdong'), tileOf('shanghai')]));
  await page.locator('#localdns-map').screenshot({ path: `${SHOTS}/localdns-map.png` });
  await shot('localdns');
  await page.selectOption('select[name=isp]', 'telecom');
  await until('one carrier\'s map', async () => (await page.$$eval('#localdns-map g.tile.has-data', gs => gs.map(g => g.dataset.region).sort().join())) === 'guangdong,jiangsu,zhejiang');
  check(true, 'the map filters by carrier');

  // The policy page: the place's state and steps, and its chart: a line per cohort with
  // requests (the ramped side's outage in it), the threshold, and the share in force.
  await page.goto(`${BASE}/console#/policy/unicom/shanghai/1h`);
  await page.waitForSelector('#policy-chart svg.policy-chart');
  check(await page.locator('table span.badge[data-state=recovering]').count() >= 1, 'the places table shows unicom/shanghai recovering');
  const cohorts = await page.$$eval('#policy-chart path.line[data-cohort]', ps => ps.map(p => [p.dataset.cohort, (p.getAttribute('d') || '').split(/[ML]/).filter(Boolean).length]));
  check(cohorts.length === 3 && cohorts.every(([, n]) => n >= 50), `a line per cohort through the hour: ${JSON.stringify(cohorts)}`);
  check(await page.locator('#policy-chart line.threshold').count() === 1, 'the policy chart draws the threshold');
  const shareSteps = await page.$eval('#policy-chart path.share', p => (p.getAttribute('d') || '').split('M').length - 1);
  check(shareSteps === 1, 'the share is one step line');
  const stepRows = await page.$$eval('#policy-place table tbody tr', rs => rs.map(r => r.textContent));
  check(stepRows.length === 3 && stepRows[0].includes('25%') && stepRows[2].includes('threshold'), 'the steps, newest first, with their reasons: ' + JSON.stringify(stepRows));
  await page.locator('#policy-chart').screenshot({ path: `${SHOTS}/policy-chart.png` });
  await shot('policy');

  // The overview with traffic: answers flowing between two readings.
  await page.goto(`${BASE}/console#/overview`);
  await page.waitForSelector('text=Nodes up');
  const end = Date.now() + 2500;
  while (Date.now() < end) await Promise.all(Array.from({ length: 10 }, () => d()));
  await page.waitForSelector('text=Answers per second by front-end', { timeout: 6000 });
  await until('the overview shows /d answers per second', async () =>
    page.evaluate(() => [...document.querySelectorAll('tr')].some(tr => tr.cells[0] && tr.cells[0].textContent === 'd' && Number(tr.cells[1].textContent.replace(/,/g, '')) > 0)));
  check(true, 'the overview counts answers per second');
  // The vendor switches in force, one line (nothing set: the defaults).
  const switches = await page.textContent('#vendor-switches');
  check(switches.includes('service_status not sent') && switches.includes('log:0 domain:0'), 'the overview shows the vendor switches: ' + switches);
  await shot('overview');

  // Readable at a phone's width.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${BASE}/console#/overview`);
  await page.waitForSelector('text=Nodes up');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 1, 'no sideways scrolling at 390 px: ' + overflow);
  await shot('overview-phone');
  await page.goto(`${BASE}/console#/events/1h`);
  await page.waitForSelector('#events-chart svg.events-chart');
  const chartOverflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(chartOverflow <= 1, 'the events chart fits a phone: ' + chartOverflow);
  await page.setViewportSize({ width: 1280, height: 860 });

  // Sign-out: the cookie is cleared, and this replica refuses the old one.
  await page.click('#signout');
  await page.waitForSelector('#signin');
  const old = `httpdns_console=${cookie.value}`;
  const after = await api.get(`${BASE}/admin/v1/nodes`, { headers: { Cookie: old } });
  check(after.status() === 401, 'the signed-out session is refused: ' + after.status());

  // A viewer's token: the role is shown, and what it may not do is not offered.
  if (process.env.VIEWER) {
    await page.fill('input[name=token]', process.env.VIEWER);
    await page.keyboard.press('Enter');
    await page.waitForSelector('#who:has-text("(viewer)")');
    await page.goto(`${BASE}/console#/nodes`);
    await page.waitForSelector('main table');
    check(await page.locator('main button:has-text("Create")').count() === 0 && await page.locator('main button:has-text("Delete")').count() === 0,
      'a viewer is offered no Create or Delete');
    check(await page.isHidden('#nav-tokens'), 'a viewer sees no Tokens section');
    await page.goto(`${BASE}/console#/audit`);
    // The page replaces the nodes page when its answer arrives: wait for its content.
    await until('the audit page lists the changes made through the console',
      async () => (await page.textContent('main')).includes('/admin/v1/nodes/'));
    check(true, 'the audit page lists the changes made through the console');
    await shot('audit');
    await page.click('#signout');
    await page.waitForSelector('#signin');
  }
  check(errors.length === 0, 'no script errors: ' + JSON.stringify(errors));
} finally {
  await browser.close();
}
console.log('console: all checks passed');
