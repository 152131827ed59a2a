// The agentry console and the `agentry run --report` page: one renderer, no framework.
// Every string from the server goes into the page as a text node or an attribute value
// (never parsed as HTML), so a hostile session's content cannot become markup.
'use strict';
(function () {
  const SVG = 'http://www.w3.org/2000/svg';

  // ---- building nodes -------------------------------------------------------------
  function add(node, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child);
    }
    return node;
  }
  function attrs(node, props) {
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else if (key === 'class') node.setAttribute('class', value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
    return node;
  }
  function h(tag, props, ...children) { return add(attrs(document.createElement(tag), props), children); }
  function s(tag, props, ...children) { return add(attrs(document.createElementNS(SVG, tag), props), children); }

  // ---- formatting -----------------------------------------------------------------
  function usd(value) {
    if (value === null || value === undefined) return '–';
    if (value === 0) return '$0';
    return '$' + (value < 0.01 ? value.toFixed(6) : value.toFixed(4));
  }
  function tokens(usage) {
    if (!usage) return 0;
    return (usage.input_tokens || 0) + (usage.output_tokens || 0);
  }
  function int(n) { return (n || 0).toLocaleString('en-US'); }
  function ms(value) {
    if (value === null || value === undefined) return '–';
    if (value >= 1000) return (value / 1000).toFixed(2) + ' s';
    return (value < 10 ? value.toFixed(2) : Math.round(value)) + ' ms';
  }
  function when(msSinceEpoch) {
    if (!msSinceEpoch) return '–';
    return new Date(msSinceEpoch).toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
  }
  function json(value) {
    try { return JSON.stringify(value, null, 2); } catch (_) { return String(value); }
  }
  function badge(text, kind) { return h('span', { class: 'badge ' + (kind || text) }, text); }

  // ---- the shared renderer: conversation, timeline, usage --------------------------
  function resultText(content) {
    if (typeof content === 'string') return content;
    if (!Array.isArray(content)) return json(content);
    return content.map((block) => {
      if (block.type === 'text') return block.text;
      if (block.type === 'json') return json(block.value);
      return '[' + block.type + (block.media_type ? ' ' + block.media_type : '') + ']';
    }).join('\n');
  }

  function toolCall(call) {
    return h('div', { class: 'call', 'data-call-id': call.id },
      h('div', null, h('strong', null, 'tool call '), h('code', null, call.name), ' ', h('span', { class: 'muted' }, call.id)),
      h('pre', { 'aria-label': 'arguments of ' + call.name }, json(call.arguments)));
  }

  function toolResult(message, truncated) {
    const failed = message.is_error === true;
    return h('div', { class: 'call' + (failed ? ' failed' : ''), 'data-result-of': message.tool_call_id },
      h('div', null, h('strong', null, failed ? 'tool error ' : 'tool result '), h('code', null, message.name || ''), ' ',
        truncated ? badge('truncated', 'truncated') : null),
      h('pre', { 'aria-label': 'result of ' + (message.name || 'tool') }, resultText(message.content)));
  }

  function messageItem(message, truncated) {
    const item = h('li', { class: 'msg ' + message.role }, h('div', { class: 'role' }, message.role));
    if (message.role === 'tool') {
      add(item, [toolResult(message, truncated.has(message.tool_call_id))]);
      return item;
    }
    const content = typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : (message.content || []);
    for (const block of content) {
      if (block.type === 'text') add(item, [h('div', { class: 'text' }, block.text)]);
      else if (block.type === 'refusal') add(item, [h('div', { class: 'text error' }, block.text)]);
      else if (block.type === 'thinking') {
        if (block.thinking) add(item, [h('details', null, h('summary', null, 'thinking'), h('div', { class: 'text muted' }, block.thinking))]);
      } else if (block.type === 'tool_call') add(item, [toolCall(block)]);
      else add(item, [h('div', { class: 'muted' }, '[' + block.type + ']')]);
    }
    if (message.usage) {
      add(item, [h('div', { class: 'muted' }, int(message.usage.input_tokens) + ' in · ' + int(message.usage.output_tokens) + ' out tokens')]);
    }
    return item;
  }

  function conversation(messages, timeline, system) {
    const truncated = new Set();
    for (const call of (timeline && timeline.tool_calls) || []) if (call.truncated) truncated.add(call.call_id);
    const list = h('ol', { class: 'msgs', 'aria-label': 'Conversation' });
    if (system) list.append(h('li', { class: 'msg system' }, h('div', { class: 'role' }, 'system'), h('div', { class: 'text muted' }, system)));
    for (const message of messages || []) list.append(messageItem(message, truncated));
    return list;
  }

  // One section per round: the model call and each tool call as bars on the round's clock.
  function timelineView(timeline) {
    const box = h('div', { class: 'timeline' });
    const models = (timeline && timeline.model_calls) || [];
    const tools = (timeline && timeline.tool_calls) || [];
    if (!models.length && !tools.length) {
      box.append(h('p', { class: 'muted' }, 'No model or tool calls recorded yet.'));
      return box;
    }
    if (timeline.has_more) box.append(h('p', { class: 'muted' }, 'Only the latest 2,000 model calls and 2,000 tool calls are shown.'));
    box.append(h('div', { class: 'legend', 'aria-hidden': 'true' },
      h('span', null, h('span', { class: 'sw model' }), 'model call'),
      h('span', null, h('span', { class: 'sw first' }), 'to first event'),
      h('span', null, h('span', { class: 'sw tool' }), 'tool call')));
    // In time order, a round number going down starts a new turn (a resumed run keeps
    // counting the rounds of the turn it resumes).
    const rows = models.map((row) => ({ kind: 'model', row })).concat(tools.map((row) => ({ kind: 'tool', row })))
      .sort((a, b) => a.row.started_us - b.row.started_us);
    const groups = [];
    let turn = 0;
    for (const { kind, row } of rows) {
      let group = groups[groups.length - 1];
      if (!group || row.round < group.round) turn += 1;
      if (!group || row.round !== group.round || group.turn !== turn) {
        group = { turn: turn, round: row.round, models: [], tools: [] };
        groups.push(group);
      }
      (kind === 'model' ? group.models : group.tools).push(row);
    }
    for (const round of groups) {
      const bars = [];
      for (const m of round.models) bars.push({ kind: m.error ? 'failed' : 'model', start: m.started_us, dur: m.latency_ms, first: m.first_event_ms,
        label: 'model ' + m.model + ' · ' + ms(m.latency_ms) + ' · first event ' + ms(m.first_event_ms) + ' · ' + int(m.input_tokens) + ' in / ' + int(m.output_tokens) + ' out · ' + usd(m.cost_usd) + (m.error ? ' · ' + m.error : '') });
      for (const t of round.tools) bars.push({ kind: t.error ? 'failed' : 'tool', start: t.started_us, dur: t.duration_ms,
        label: 'tool ' + t.tool + ' · ' + ms(t.duration_ms) + ' · ' + int(t.result_bytes) + ' bytes' + (t.truncated ? ' (truncated to ' + int(t.sent_bytes) + ')' : '') + (t.error ? ' · ' + t.error : '') });
      const t0 = Math.min(...bars.map((b) => b.start));
      const t1 = Math.max(...bars.map((b) => b.start + b.dur * 1000));
      const span = Math.max(t1 - t0, 1);
      const width = 1000; const left = 0; const rowH = 22; const gap = 20;
      const chart = s('svg', { viewBox: '0 0 ' + width + ' ' + (bars.length * (rowH + gap)), role: 'img',
        'aria-label': 'Turn ' + round.turn + ', round ' + round.round + ': ' + bars.map((b) => b.label).join('; ') });
      bars.forEach((bar, i) => {
        const y = i * (rowH + gap);
        const x = left + ((bar.start - t0) / span) * width;
        const w = Math.max(((bar.dur * 1000) / span) * width, 2);
        chart.append(s('text', { x: 0, y: y + 12 }, bar.label));
        chart.append(s('rect', { x: x, y: y + 16, width: w, height: rowH - 6, rx: 3, class: bar.kind }, s('title', null, bar.label)));
        if (bar.kind === 'model' && bar.first) {
          chart.append(s('rect', { x: x, y: y + 16, width: Math.max(((bar.first * 1000) / span) * width, 1), height: rowH - 6, rx: 3, class: 'first' }));
        }
      });
      const spent = round.models.reduce((sum, m) => sum + (m.cost_usd || 0), 0);
      const used = round.models.reduce((sum, m) => sum + (m.input_tokens || 0) + (m.output_tokens || 0), 0);
      box.append(h('section', { class: 'round', 'data-round': round.round },
        h('h4', null, 'Turn ' + round.turn + ' · round ' + round.round + ' · ' + ms(span / 1000) + ' · ' + int(used) + ' tokens · ' + usd(spent)),
        chart));
    }
    return box;
  }

  function usageTable(rows, keyName) {
    return h('table', { 'aria-label': 'Usage by ' + keyName },
      h('thead', null, h('tr', null, h('th', null, keyName), h('th', { class: 'num' }, 'model calls'), h('th', { class: 'num' }, 'tool calls'),
        h('th', { class: 'num' }, 'input tokens'), h('th', { class: 'num' }, 'output tokens'), h('th', { class: 'num' }, 'cost'))),
      h('tbody', null, ...rows.map((row) => h('tr', null, h('td', null, row.key), h('td', { class: 'num' }, int(row.model_calls)),
        h('td', { class: 'num' }, int(row.tool_calls)), h('td', { class: 'num' }, int(row.input_tokens)),
        h('td', { class: 'num' }, int(row.output_tokens)), h('td', { class: 'num' }, usd(row.cost_usd))))));
  }

  function barChart(caption, rows, value, format, cls) {
    const width = 480; const barH = 24; const gap = 8; const labelW = 150;
    const max = Math.max(...rows.map(value), 0) || 1;
    const chart = s('svg', { viewBox: '0 0 ' + width + ' ' + Math.max(rows.length * (barH + gap), barH), role: 'img',
      'aria-label': caption + ': ' + rows.map((r) => r.key + ' ' + format(value(r))).join(', ') });
    rows.forEach((row, i) => {
      const y = i * (barH + gap);
      const w = Math.max((value(row) / max) * (width - labelW - 90), 1);
      chart.append(s('text', { x: 0, y: y + 16 }, row.key.length > 22 ? row.key.slice(0, 21) + '…' : row.key));
      chart.append(s('rect', { x: labelW, y: y + 2, width: w, height: barH - 4, rx: 3, class: cls || 'bar' }, s('title', null, row.key + ': ' + format(value(row)))));
      chart.append(s('text', { x: labelW + w + 6, y: y + 16 }, format(value(row))));
    });
    if (!rows.length) chart.append(s('text', { x: 0, y: 16 }, 'no usage in this range'));
    return h('figure', { class: 'panel' }, h('figcaption', null, caption), chart);
  }

  function summary(items) {
    return h('dl', { class: 'summary' }, ...items.map(([term, value]) => h('div', null, h('dt', null, term), h('dd', null, value))));
  }

  function usageFromTimeline(timeline) {
    const byModel = new Map();
    for (const m of (timeline && timeline.model_calls) || []) {
      const row = byModel.get(m.model) || { key: m.model, model_calls: 0, tool_calls: 0, input_tokens: 0, output_tokens: 0, cost_usd: 0 };
      row.model_calls += 1; row.tool_calls += m.tool_calls || 0;
      row.input_tokens += m.input_tokens || 0; row.output_tokens += m.output_tokens || 0; row.cost_usd += m.cost_usd || 0;
      byModel.set(m.model, row);
    }
    return [...byModel.values()];
  }

  // ---- the report page (`agentry run --report`) -----------------------------------
  function report(root, data) {
    const session = data.session || {};
    document.title = 'agentry run · ' + (session.model || '') + ' · ' + (session.id || '');
    root.replaceChildren(
      h('h2', null, 'Run of ', h('code', null, session.id || '')),
      summary([['status', badge(session.status || '–')], ['model', session.model || '–'], ['provider', data.provider || '–'],
        ['tokens', int(tokens(session.usage))], ['cost', usd(session.cost_usd)], ['written', when(data.written_at_ms)]]),
      h('section', { 'aria-labelledby': 'conv-h' }, h('h3', { id: 'conv-h' }, 'Conversation'), conversation(session.messages, data.timeline, session.system)),
      h('section', { 'aria-labelledby': 'tl-h' }, h('h3', { id: 'tl-h' }, 'Timeline'), timelineView(data.timeline)),
      h('section', { 'aria-labelledby': 'use-h' }, h('h3', { id: 'use-h' }, 'Usage'), usageTable(usageFromTimeline(data.timeline), 'model')));
  }

  // ---- the console ----------------------------------------------------------------
  const KEY = 'agentry.console.key';
  const app = document.getElementById('app');
  // replaceChildren would show a skipped (null) part as the text "null".
  const show = (...nodes) => app.replaceChildren(...nodes.filter(Boolean));
  const dataNode = document.getElementById('agentry-report');
  if (dataNode) {
    report(app, JSON.parse(dataNode.textContent));
    return;
  }
  let key = sessionStorage.getItem(KEY);
  // The API's root is the directory above this script's (`…/console/console.js`): every API
  // URL is relative to it, so the console works under a reverse proxy's path prefix.
  const apiRoot = new URL('../', (document.currentScript && document.currentScript.src) || location.href);
  const endpoint = (path) => new URL(path, apiRoot).href;

  class ApiFailure extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path, init) {
    const options = Object.assign({}, init || {});
    options.headers = Object.assign({ authorization: 'Bearer ' + key }, options.headers || {});
    options.cache = 'no-store';
    const response = await fetch(endpoint(path), options);
    if (response.status === 401) { signOut('That key was refused.'); throw new ApiFailure(401, 'signed out'); }
    if (!response.ok) {
      let message = response.status + ' ' + response.statusText;
      try { const body = await response.json(); message = (body.error && body.error.message) || message; } catch (_) { /* not JSON */ }
      throw new ApiFailure(response.status, message);
    }
    return response;
  }
  async function getJson(path) { return (await api(path)).json(); }

  function failure(error) { return h('p', { class: 'error', role: 'alert' }, String(error.message || error)); }

  function signOut(message) {
    key = null;
    sessionStorage.removeItem(KEY);
    // The list's filters were this tenant's too.
    for (const slot of Object.values(FILTERS)) sessionStorage.removeItem(slot);
    pages.after = [null];
    document.getElementById('nav').hidden = true;
    signIn(message);
  }

  function signIn(message) {
    const input = h('input', { id: 'key', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'key-help', size: 48 });
    const status = h('p', { role: 'status', class: 'error' }, message || '');
    const form = h('form', { class: 'panel', 'aria-labelledby': 'signin-h', onsubmit: async (event) => {
      event.preventDefault();
      key = input.value.trim();
      try {
        const response = await fetch(endpoint('v1/sessions?limit=1'), { headers: { authorization: 'Bearer ' + key }, cache: 'no-store' });
        if (!response.ok) { key = null; status.textContent = response.status === 401 ? 'That key was refused.' : 'Sign-in failed: ' + response.status; return; }
        sessionStorage.setItem(KEY, key);
        input.value = '';
        start();
      } catch (error) { key = null; status.textContent = String(error.message || error); }
    } },
    h('h2', { id: 'signin-h' }, 'Sign in'),
    h('label', { for: 'key' }, 'API key'), input,
    h('p', { id: 'key-help', class: 'muted' }, 'Your tenant\'s key. It stays in this tab (sessionStorage) and is sent only as an Authorization header.'),
    h('button', { type: 'submit' }, 'Sign in'), status);
    show(form);
    input.focus();
  }

  function start() {
    document.getElementById('nav').hidden = false;
    route();
  }

  function route() {
    if (!key) { signIn(); return; }
    const hash = location.hash || '#/sessions';
    const session = hash.match(/^#\/sessions\/(.+)$/);
    if (session) sessionView(decodeURIComponent(session[1]));
    else if (hash.startsWith('#/usage')) usageView();
    else sessionsView();
  }

  // Sessions: one request per page. The list carries each session's model, tokens and cost,
  // and the server filters by status, model and id before it cuts the page, so the filters
  // cover every session and the pager walks only the matches.
  const PAGE = 20;
  const pages = { after: [null] };
  const FILTERS = { status: 'agentry.console.status', model: 'agentry.console.model', q: 'agentry.console.text' };
  let models = null;
  let refocus = null; // the filter that changed, focused again in the redrawn view (keyboard users)
  async function sessionsView() {
    const after = pages.after[pages.after.length - 1];
    const filter = {};
    for (const [name, slot] of Object.entries(FILTERS)) filter[name] = sessionStorage.getItem(slot) || '';
    const heading = h('h2', { id: 'sessions-h' }, 'Sessions');
    show(heading, h('p', { class: 'muted' }, 'Loading…'));
    let query = 'limit=' + PAGE + (after ? '&after=' + encodeURIComponent(after) : '');
    for (const [name, value] of Object.entries(filter)) if (value) query += '&' + name + '=' + encodeURIComponent(value);
    let list;
    try {
      [list] = await Promise.all([getJson('v1/sessions?' + query), modelNames()]);
    } catch (error) { show(heading, failure(error)); return; }
    // A changed filter starts again at the first page.
    const refilter = (name, value) => { sessionStorage.setItem(FILTERS[name], value); pages.after = [null]; refocus = name; sessionsView(); };
    const statusSelect = h('select', { id: 'filter-status', onchange: () => refilter('status', statusSelect.value) },
      ...['', 'idle', 'running', 'completed', 'awaiting_approval', 'awaiting_tool_execution', 'error', 'aborted'].map((v) => h('option', { value: v, selected: v === filter.status }, v || 'any')));
    const modelSelect = h('select', { id: 'filter-model', onchange: () => refilter('model', modelSelect.value) },
      ...['', ...new Set([...models, filter.model].filter(Boolean))].map((v) => h('option', { value: v, selected: v === filter.model }, v || 'any')));
    const textInput = h('input', { id: 'filter-text', type: 'search', value: filter.q, maxlength: 128, placeholder: 'part of an id' });
    let typing = null;
    textInput.addEventListener('input', () => { clearTimeout(typing); typing = setTimeout(() => refilter('q', textInput.value.trim()), 300); });
    const body = h('tbody');
    for (const row of list.data) {
      const spent = row.input_tokens == null && row.output_tokens == null ? null : row;
      body.append(h('tr', null,
        h('td', null, h('a', { href: '#/sessions/' + encodeURIComponent(row.id) }, row.id)),
        h('td', null, badge(row.status)), h('td', null, row.model || '–'), h('td', null, when(row.updated_at_ms)),
        h('td', { class: 'num' }, int(tokens(spent))), h('td', { class: 'num' }, usd(row.cost_usd))));
    }
    const filtered = filter.status || filter.model || filter.q;
    if (!body.children.length) body.append(h('tr', null, h('td', { colspan: 6, class: 'muted' }, filtered ? 'No sessions match.' : 'No sessions yet.')));
    const pager = h('div', { class: 'pager' },
      h('button', { type: 'button', class: 'secondary', disabled: pages.after.length <= 1, onclick: () => { pages.after.pop(); sessionsView(); } }, 'Previous page'),
      h('button', { type: 'button', class: 'secondary', disabled: !list.has_more, onclick: () => { pages.after.push(list.next_after); sessionsView(); } }, 'Next page'));
    show(heading,
      await newSessionForm(),
      h('div', { class: 'row', role: 'search' }, h('div', null, h('label', { for: 'filter-status' }, 'Status'), statusSelect),
        h('div', null, h('label', { for: 'filter-model' }, 'Model'), modelSelect),
        h('div', null, h('label', { for: 'filter-text' }, 'Session id contains'), textInput)),
      h('table', { 'aria-labelledby': 'sessions-h' },
        h('thead', null, h('tr', null, h('th', null, 'session'), h('th', null, 'status'), h('th', null, 'model'), h('th', null, 'updated'),
          h('th', { class: 'num' }, 'tokens'), h('th', { class: 'num' }, 'cost'))), body),
      pager);
    const focused = { status: statusSelect, model: modelSelect, q: textInput }[refocus];
    refocus = null;
    if (focused) focused.focus();
    if (focused === textInput) textInput.setSelectionRange(filter.q.length, filter.q.length);
  }

  // The server's models, asked once per page load (the model filter's choices).
  async function modelNames() {
    if (models === null) {
      try { models = (await getJson('v1/models')).data.map((m) => m.id); } catch (_) { models = []; }
    }
    return models;
  }

  async function newSessionForm() {
    const models = await modelNames();
    const model = h('select', { id: 'new-model' }, ...models.map((m) => h('option', { value: m }, m)));
    const tools = h('input', { id: 'new-tools', placeholder: 'calculator, clock' });
    const system = h('input', { id: 'new-system', size: 40 });
    const status = h('p', { role: 'status' });
    return h('form', { class: 'panel', 'aria-labelledby': 'new-h', onsubmit: async (event) => {
      event.preventDefault();
      const body = { model: model.value, tools: tools.value.split(',').map((t) => t.trim()).filter(Boolean) };
      if (system.value.trim()) body.system = system.value.trim();
      try {
        const created = await (await api('v1/sessions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
        location.hash = '#/sessions/' + encodeURIComponent(created.id);
      } catch (error) { status.replaceChildren(failure(error)); }
    } },
    h('h3', { id: 'new-h' }, 'New session'),
    h('div', { class: 'row' },
      h('div', null, h('label', { for: 'new-model' }, 'Model'), model),
      h('div', null, h('label', { for: 'new-tools' }, 'Server tools (comma-separated)'), tools),
      h('div', null, h('label', { for: 'new-system' }, 'System prompt'), system),
      h('button', { type: 'submit' }, 'Create')), status);
  }

  // One session: summary, conversation (live while this tab runs a turn), what waits for a
  // decision, the timeline and the chat box.
  let viewing = null;
  async function sessionView(id) {
    viewing = id;
    const heading = h('h2', { id: 'session-h' }, 'Session ', h('code', null, id));
    let session; let timeline = null;
    try {
      [session, timeline] = await Promise.all([
        getJson('v1/sessions/' + encodeURIComponent(id)),
        getJson('v1/sessions/' + encodeURIComponent(id) + '/timeline').catch(() => null),
      ]);
    } catch (error) { show(h('p', null, h('a', { href: '#/sessions' }, '← Sessions')), heading, failure(error)); return; }
    if (viewing !== id) return;
    const live = h('ol', { class: 'msgs', id: 'live', 'aria-live': 'polite', 'aria-label': 'This turn, as it streams' });
    const chat = chatBox(id, session, live);
    show(
      h('p', null, h('a', { href: '#/sessions' }, '← Sessions')),
      heading,
      summary([['status', badge(session.status)], ['model', session.model], ['tokens', int(tokens(session.usage))],
        ['cost', usd(session.cost_usd)], ['updated', when(session.updated_at_ms)]]),
      pendingView(id, session, live),
      h('section', { 'aria-labelledby': 'conv-h' }, h('h3', { id: 'conv-h' }, 'Conversation'),
        conversation(session.messages, timeline, session.system), live),
      chat,
      h('section', { 'aria-labelledby': 'tl-h' }, h('h3', { id: 'tl-h' }, 'Timeline'),
        timeline ? timelineView(timeline) : h('p', { class: 'muted' }, 'No timeline: accounting is off on this server.')));
    if (session.status === 'running') setTimeout(() => { if (viewing === id && location.hash.startsWith('#/sessions/')) sessionView(id); }, 2000);
  }

  function pendingView(id, session, live) {
    const approvals = session.pending_approvals || [];
    const remote = session.pending_tool_calls || [];
    if (!approvals.length && !remote.length) return null;
    const box = h('section', { class: 'panel', 'aria-labelledby': 'pending-h' }, h('h3', { id: 'pending-h' }, 'Waiting for you'));
    if (approvals.length) {
      const decisions = new Map();
      const decide = (call, approved) => {
        decisions.set(call.id, { call_id: call.id, approved: approved, ...(approved ? {} : { reason: 'denied in the console' }) });
        const mark = document.getElementById('decision-' + call.id);
        if (mark) mark.textContent = approved ? 'approved' : 'denied';
        if (decisions.size === approvals.length) execute(id, { approvals: [...decisions.values()] }, live);
      };
      for (const call of approvals) {
        box.append(h('div', { class: 'call', 'data-approval': call.id }, toolCall(call),
          h('div', { class: 'row' },
            h('button', { type: 'button', 'aria-label': 'Approve ' + call.name + ' ' + call.id, onclick: () => decide(call, true) }, 'Approve'),
            h('button', { type: 'button', class: 'deny', 'aria-label': 'Deny ' + call.name + ' ' + call.id, onclick: () => decide(call, false) }, 'Deny'),
            h('span', { id: 'decision-' + call.id, role: 'status' }))));
      }
    }
    if (remote.length) {
      const fields = remote.map((call) => ({ call, input: h('textarea', { id: 'result-' + call.id }) }));
      box.append(h('form', { onsubmit: (event) => {
        event.preventDefault();
        execute(id, { tool_results: fields.map(({ call, input }) => ({ tool_call_id: call.id, content: input.value })) }, live);
      } }, ...fields.map(({ call, input }) => h('div', null, toolCall(call), h('label', { for: 'result-' + call.id }, 'Result of ' + call.name), input)),
      h('button', { type: 'submit' }, 'Send results')));
    }
    return box;
  }

  function chatBox(id, session, live) {
    const waiting = session.status === 'awaiting_approval' || session.status === 'awaiting_tool_execution' || session.status === 'running';
    const input = h('textarea', { id: 'message', disabled: waiting, 'aria-describedby': 'message-help' });
    const form = h('form', { class: 'panel', 'aria-labelledby': 'chat-h', onsubmit: (event) => {
      event.preventDefault();
      const text = input.value.trim();
      if (!text) return;
      input.value = '';
      execute(id, { message: text }, live);
    } },
    h('h3', { id: 'chat-h' }, 'Next turn'),
    h('label', { for: 'message' }, 'Message'), input,
    h('p', { id: 'message-help', class: 'muted' }, waiting ? 'Answer what waits above first.' : 'Ctrl+Enter sends.'),
    h('button', { type: 'submit', disabled: waiting }, 'Send'));
    input.addEventListener('keydown', (event) => { if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) form.requestSubmit(); });
    return form;
  }

  // Runs an execute and shows its events as they arrive (the native SSE of
  // POST /v1/sessions/{id}/execute, read with fetch so the key stays in a header).
  async function execute(id, body, live) {
    for (const button of app.querySelectorAll('button')) button.disabled = true;
    const status = h('li', { class: 'msg', role: 'status' }, 'Running…');
    let text = null;
    const calls = new Map();
    live.replaceChildren(status);
    const assistant = () => {
      if (!text) { const item = h('li', { class: 'msg assistant' }, h('div', { class: 'role' }, 'assistant')); text = h('div', { class: 'text' }); item.append(text); live.insertBefore(item, status); }
      return text;
    };
    const handle = (event) => {
      switch (event.type) {
        case 'message_start': if (event.role === 'assistant') text = null; break;
        case 'text_delta': assistant().append(document.createTextNode(event.delta)); break;
        case 'tool_call_end': if (event.tool_call) { assistant(); text.parentNode.append(toolCall(event.tool_call)); } break;
        case 'tool_execution_end': {
          const result = toolResult({ role: 'tool', tool_call_id: event.call_id, name: event.tool_name, content: event.output, is_error: event.is_error }, event.truncated === true);
          calls.set(event.call_id, result);
          live.insertBefore(h('li', { class: 'msg tool' }, h('div', { class: 'role' }, 'tool'), result), status);
          break;
        }
        case 'approval_requested': status.textContent = 'Waiting for approval of ' + event.tool_calls.map((c) => c.name).join(', '); break;
        case 'awaiting_tool_execution': status.textContent = 'Waiting for the results of ' + event.tool_calls.map((c) => c.name).join(', '); break;
        case 'error': status.replaceChildren(h('span', { class: 'error' }, event.error.message)); break;
        case 'execute_complete': status.textContent = 'Turn ended: ' + event.status + ' · ' + int(tokens(event.usage)) + ' tokens · ' + usd(event.cost_usd); break;
        default: break;
      }
    };
    try {
      const response = await api('v1/sessions/' + encodeURIComponent(id) + '/execute', {
        method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify(body) });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const frame = buffer.slice(0, end); buffer = buffer.slice(end + 2);
          const data = frame.split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trimStart()).join('\n');
          if (data) { try { handle(JSON.parse(data)); } catch (_) { /* a frame that is not JSON is skipped */ } }
        }
      }
    } catch (error) {
      status.replaceChildren(failure(error));
      for (const button of app.querySelectorAll('button')) button.disabled = false;
      return;
    }
    // The stored session is the truth: redraw from it (and its timeline) once the turn ends.
    if (viewing === id) await sessionView(id);
  }

  async function usageView() {
    const heading = h('h2', { id: 'usage-h' }, 'Usage (last 30 days)');
    show(heading, h('p', { class: 'muted' }, 'Loading…'));
    let days; let models;
    try {
      [days, models] = await Promise.all([getJson('v1/usage?group_by=day'), getJson('v1/usage?group_by=model')]);
    } catch (error) { show(heading, failure(error)); return; }
    const byDay = days.data.slice().sort((a, b) => (a.key < b.key ? -1 : 1));
    const tok = (r) => (r.input_tokens || 0) + (r.output_tokens || 0);
    show(heading,
      h('div', { class: 'charts' },
        barChart('Cost per day (USD)', byDay, (r) => r.cost_usd || 0, usd, 'bar'),
        barChart('Tokens per day', byDay, tok, int, 'bar2'),
        barChart('Cost per model (USD)', models.data, (r) => r.cost_usd || 0, usd, 'bar'),
        barChart('Tokens per model', models.data, tok, int, 'bar2')),
      h('h3', null, 'Per model'), usageTable(models.data, 'model'),
      h('h3', null, 'Per day'), usageTable(byDay, 'day'));
  }

  document.getElementById('sign-out').addEventListener('click', () => signOut('Signed out.'));
  window.addEventListener('hashchange', () => { route(); app.focus(); });
  if (key) start(); else signIn();
})();
