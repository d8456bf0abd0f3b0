// The operator's live view of a sale: reads GET /metrics every second with the admin
// token and shows one voucher's units left, units sold, orders and queue depth (an order
// may hold several units: docs/design.md, "Quantities"), the buyers waiting in its line
// and the units handed from it (docs/design.md, "The line"), as numbers and as
// charts of the last minute, with the purchase outcomes per second.
"use strict";

const api = document.querySelector('meta[name="seckill-api"]').content;
const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const WINDOW_S = 60;
// The series /metrics has per voucher, and the field each one fills.
const FIELDS = {
  seckill_voucher_units_left: "left",
  seckill_voucher_units_initial: "initial",
  seckill_voucher_orders_total: "orders",
  seckill_units_sold_total: "sold",
  seckill_queue_depth: "queue",
  seckill_line_length: "line",
};
const LEVELS = [
  ["left", "units left", "#c2410c"],
  ["sold", "units sold", "#0f766e"],
  ["orders", "orders committed", "#1d4ed8"],
];
// The contract's outcome labels, in the order the bars stack them.
const OUTCOMES = [
  ["admitted", "#15803d"],
  ["queued", "#65a30d"],
  ["already_ordered", "#0891b2"],
  ["sold_out", "#b91c1c"],
  ["short", "#9f1239"],
  ["ended", "#7c3aed"],
  ["not_started", "#ca8a04"],
  ["throttled", "#ea580c"],
  ["busy", "#db2777"],
  ["unavailable", "#57534e"],
];

// Held here, never in the URL. The page never stores it; it reads the one the console
// keeps in this tab's sessionStorage (metrics.js), when there is one.
let token = "";
// Bumped to stop a polling loop: each loop runs while it holds the current value.
let generation = 0;
// The polls of the last minute, oldest first: { t: seconds, vouchers: Map(id → sample) }.
const history = [];

// voucher id → { left, initial, orders, sold, queue, outcomes: { outcome → count } }.
function byVoucher(series) {
  const vouchers = new Map();
  for (const { name, labels, value } of series) {
    const id = labels.voucher_id;
    if (id === undefined) continue;
    if (!vouchers.has(id)) vouchers.set(id, { outcomes: {} });
    const sample = vouchers.get(id);
    if (FIELDS[name]) sample[FIELDS[name]] = value;
    else if (name === "seckill_purchase_outcomes_total") sample.outcomes[labels.outcome] = value;
    else if (name === "seckill_line_total" && labels.outcome === "handed") sample.handed = value;
  }
  return vouchers;
}

// What a counter grew by between two polls. One that went down was reset (Redis lost its
// data) and has counted from zero since, so all of its value is new: Prometheus's rule.
function increase(before, after) {
  return after >= before ? after - before : after;
}

function say(text, tone) {
  $("status").textContent = text;
  $("status").className = tone || "";
}

async function watch(mine) {
  while (mine === generation) {
    const started = performance.now();
    await poll(mine);
    await new Promise((done) => setTimeout(done, POLL_MS - (performance.now() - started)));
  }
}

async function poll(mine) {
  let response = null;
  let text;
  try {
    response = await fetch(`${api}/metrics`, {
      headers: { Authorization: `Bearer ${token}` },
      cache: "no-store",
    });
    text = await response.text();
  } catch (e) {
    response = null; // offline, cut off, or refused by CORS
  }
  if (mine !== generation) return; // the operator changed the token meanwhile
  if (!response) {
    say("Cannot reach the API. Trying again every second…", "bad");
  } else if (response.status === 401 || response.status === 403) {
    generation++;
    say(
      response.status === 401
        ? "The API refused this token (401). Paste the admin token."
        : "This token is not the admin's (403): a buyer's token cannot watch a sale.",
      "bad",
    );
  } else if (!response.ok) {
    say(`The API answered ${response.status}. Trying again every second…`, "bad");
  } else {
    record(text);
  }
}

function record(text) {
  const t = performance.now() / 1000;
  history.push({ t, vouchers: byVoucher(parseMetrics(text)) });
  // One poll older than the window stays, for the first rate in it.
  while (history.length > 2 && history[1].t < t - WINDOW_S) history.shift();
  fillVouchers([...history.at(-1).vouchers.keys()]);
  say(`Watching. Updated ${new Date().toLocaleTimeString()}.`);
  render();
}

// The voucher list from the last poll, largest (newest) id first. The chosen one stays
// even while /metrics lacks it, so that the choice survives Redis losing its data.
function fillVouchers(ids) {
  const select = $("voucher");
  if (select.value && !ids.includes(select.value)) ids.push(select.value);
  ids.sort((a, b) => b.length - a.length || (a < b ? 1 : a > b ? -1 : 0));
  const shown = [...select.options].slice(1).map((option) => option.value);
  if (shown.join() === ids.join()) return; // rebuilding would close an open list
  const chosen = select.value;
  while (select.length > 1) select.remove(1);
  for (const id of ids) select.add(new Option(`Voucher ${id}`, id));
  select.value = chosen;
}

// Whether a counter went down between two polls: a reset.
function wentDown(before, after) {
  const count = (sample, outcome) => sample.outcomes[outcome] ?? 0;
  return (
    after.orders < before.orders ||
    OUTCOMES.some(([outcome]) => count(after, outcome) < count(before, outcome))
  );
}

function render() {
  const id = $("voucher").value;
  const samples = history.flatMap(({ t, vouchers }) =>
    vouchers.has(id) ? [{ t, ...vouchers.get(id) }] : [],
  );
  const latest = history.at(-1)?.vouchers.get(id);
  $("left").textContent = latest ? latest.left : "–";
  $("initial").textContent = latest ? `of ${latest.initial}` : "";
  $("orders").textContent = latest ? latest.orders : "–";
  $("sold").textContent = latest ? latest.sold ?? 0 : "–";
  $("queue").textContent = latest ? latest.queue : "–";
  $("line").textContent = latest ? latest.line ?? 0 : "–";
  $("handed").textContent = latest ? latest.handed ?? 0 : "–";

  // One bar per pair of consecutive polls: each outcome's requests per second between them.
  const bars = samples.slice(1).map((after, i) => {
    const before = samples[i];
    const seconds = after.t - before.t;
    const rates = OUTCOMES.map(
      ([outcome]) =>
        increase(before.outcomes[outcome] ?? 0, after.outcomes[outcome] ?? 0) / seconds,
    );
    return { from: before.t, to: after.t, rates, reset: wentDown(before, after) };
  });
  const now = history.length ? history.at(-1).t : performance.now() / 1000;
  drawLevels(samples, now);
  drawRates(bars, now);

  const reset = bars.findLast((bar) => bar.reset);
  if (reset) {
    $("notice").textContent =
      `The counters went back ${Math.round(now - reset.to)} s ago (Redis lost its data?): ` +
      "the rates count on from zero.";
  } else if (id && history.length && !latest) {
    $("notice").textContent = `Voucher ${id} is not in /metrics now: Redis holds no sale for it.`;
  } else {
    $("notice").textContent = "";
  }
}

function drawLevels(samples, now) {
  const top = Math.max(1, ...samples.flatMap((s) => [s.initial, s.left, s.orders, s.sold ?? 0]));
  const { context, x, y } = frame($("levels"), top, "", now);
  for (const [field, , color] of LEVELS) {
    context.strokeStyle = color;
    context.lineWidth = 2;
    context.beginPath();
    for (const sample of samples) context.lineTo(x(sample.t), y(sample[field] ?? 0));
    context.stroke();
  }
}

function drawRates(bars, now) {
  const top = Math.max(1, ...bars.map((bar) => bar.rates.reduce((a, b) => a + b, 0)));
  const { context, x, y } = frame($("rates"), top, "/s", now);
  for (const bar of bars) {
    let base = 0;
    bar.rates.forEach((rate, k) => {
      context.fillStyle = OUTCOMES[k][1];
      // A pixel of gap either side, so that neighbouring bars stay apart.
      const [from, to] = [x(bar.from) + 1, x(bar.to) - 1];
      context.fillRect(from, y(base + rate), to - from, y(base) - y(base + rate));
      base += rate;
    });
  }
  const latest = bars.at(-1)?.rates;
  key(
    $("rates-key"),
    OUTCOMES.map(([outcome, color], k) => {
      const rate = latest ? latest[k] : 0;
      return [`${outcome} ${rate.toFixed(1)}/s`, color];
    }),
  );
}

// The smallest of 1, 2, 5 times a power of ten that is at least `value`: a round scale.
function roundUp(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].find((step) => step * power >= value) * power;
}

// A chart's frame on `canvas`, sized for the screen: a grid from 0 up to at least `top`
// with its values (`unit` after them), and the last minute along x. Returns the context,
// clipped to the plot, and the mappings from time and value to pixels.
function frame(canvas, top, unit, now) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const context = canvas.getContext("2d");
  context.scale(ratio, ratio);
  const [left, right, above, below] = [48, 8, 8, 22];
  const scale = roundUp(top);
  const x = (t) => left + ((t - now + WINDOW_S) / WINDOW_S) * (width - left - right);
  const y = (value) => height - below - (value / scale) * (height - above - below);

  context.font = "12px system-ui, sans-serif";
  context.fillStyle = "#6b5b4d";
  context.strokeStyle = "#e7ded3";
  context.textAlign = "right";
  context.textBaseline = "middle";
  for (const value of [0, scale / 2, scale]) {
    context.beginPath();
    context.moveTo(left, y(value));
    context.lineTo(width - right, y(value));
    context.stroke();
    context.fillText(`${value}${unit}`, left - 6, y(value));
  }
  context.textBaseline = "top";
  for (const [ago, align] of [[WINDOW_S, "left"], [WINDOW_S / 2, "center"], [0, "right"]]) {
    context.textAlign = align;
    context.fillText(ago ? `${ago} s ago` : "now", x(now - ago), height - below + 6);
  }

  context.beginPath();
  context.rect(left, 0, width - left - right, height);
  context.clip();
  return { context, x, y };
}

// A chart's key: a coloured swatch before each label.
function key(list, entries) {
  list.replaceChildren(
    ...entries.map(([label, color]) => {
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = color;
      const item = document.createElement("li");
      item.append(swatch, label);
      return item;
    }),
  );
}

function connect(pasted) {
  if (!pasted) {
    say("Paste the admin token first.", "bad");
    return;
  }
  token = pasted;
  say("Connecting…");
  watch(++generation);
}

// `/shop/live#<id>`, as the console links a sale: that voucher chosen, listed even before
// /metrics has it.
function chooseFromHash() {
  const id = location.hash.slice(1);
  if (!/^[1-9][0-9]{0,18}$/.test(id)) return;
  const select = $("voucher");
  if (![...select.options].some((option) => option.value === id)) {
    select.add(new Option(`Voucher ${id}`, id));
  }
  select.value = id;
  render();
}

$("connect").addEventListener("submit", (event) => {
  event.preventDefault();
  connect($("token").value.trim());
});
$("voucher").addEventListener("change", render);
window.addEventListener("hashchange", chooseFromHash);
key($("levels-key"), LEVELS.map(([, label, color]) => [label, color]));
chooseFromHash();
render();
// Opened from the console in this tab: watching at once with its token.
const handed = sessionStorage.getItem(ADMIN_TOKEN_KEY);
if (handed) {
  $("token").value = handed;
  connect(handed);
}
