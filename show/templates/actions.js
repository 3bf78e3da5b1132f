async function act(path, body) {
  const token = document.getElementById('token').value;
  const headers = {'Content-Type': 'application/json'};
  if (token) headers['Authorization'] = 'Bearer ' + token;
  const out = document.getElementById('result');
  try {
    const r = await fetch(path, {method: 'POST', headers: headers, body: JSON.stringify(body)});
    const text = await r.text();
    out.textContent = r.status + ' ' + (r.ok ? 'done' : 'refused') + ': ' + text.slice(0, 400);
    out.dataset.status = String(r.status);
  } catch (e) {
    out.textContent = 'not sent: ' + e;
    out.dataset.status = 'error';
  }
}
function who() { return document.getElementById('by').value || 'on-call'; }
function note() { return document.getElementById('comment').value || 'from the incident page'; }
document.addEventListener('DOMContentLoaded', () => {
  const base = document.body.dataset.api;
  const id = document.body.dataset.incident;
  // the form only holds the fields; Enter in one of them must not submit it (a page load)
  const form = document.getElementById('act-form');
  if (form) form.addEventListener('submit', (e) => e.preventDefault());
  const on = (name, f) => { const b = document.getElementById(name); if (b) b.addEventListener('click', f); };
  on('ack', () => act(base + '/api/incidents/' + encodeURIComponent(id) + '/ack', {by: who(), comment: note()}));
  on('resolve', () => act(base + '/api/incidents/' + encodeURIComponent(id) + '/resolve', {by: who(), comment: note()}));
  on('silence', () => act(base + '/api/silences', {match: {entity: document.body.dataset.root},
    duration_s: 3600 * Number(document.getElementById('hours').value || 1), comment: note(), created_by: who()}));
});
