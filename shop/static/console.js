// The merchant's console: the sales (GET /vouchers, with the line's length from
// GET /metrics), a form that creates a sale or edits one (PATCH with the fields changed),
// adding stock, ending a sale now, and a sale's orders with their CSV. Everything with the
// admin token, which this tab's sessionStorage keeps (never the URL, never localStorage).
// What the API says is shown as text (textContent, an input's value), never as markup.
"use strict";

const api = document.querySelector('meta[name="seckill-api"]').content;
const $ = (id) => document.getElementById(id);
const REFRESH_MS = 5000;
const SALES_PAGE = 50;
const ORDERS_PAGE = 100;
// The form's fields, by the API's names.
const TEXTS = ["title", "description"];
const NUMBERS = ["stock", "per_buyer", "pay_within_s", "draw_ms", "buckets"];
const TIMES = ["begin_time", "end_time", "announce_at"];
const FIELDS = [...TEXTS, ...NUMBERS, ...TIMES];
// What a sale still lets change once open, and once ended (docs/openapi.yaml, changeVoucher;
// its buckets never). The API decides; the page greys out the rest, so that nobody types
// what will be refused.
const CHANGEABLE_ONCE_OPEN = new Set(["title", "description", "end_time", "stock"]);
const CHANGEABLE_ONCE_ENDED = new Set(["title", "description"]);

let token = sessionStorage.getItem(ADMIN_TOKEN_KEY) || "";
// Bumped on signing in and out: answers to an older session's requests are dropped.
let session = 0;
// The newest refresh's number: an older one's answer, arriving late, is dropped.
let refreshes = 0;
// The sales as listed, newest first, and the cursor of the page after them.
let sales = [];
let salesNext = null;
// Voucher id (a string, as /metrics labels it) → buyers waiting in its line.
let lines = new Map();
// The sale the form edits (null: the form creates one), and the form's values as filled,
// against which Save finds what changed.
let editing = null;
let filled = {};
// The sale whose orders are shown, and the cursor of their next page.
let ordersOf = null;
let ordersNext = null;

function say(text, tone) {
  $("status").textContent = text;
  $("status").className = tone || "";
}

// A failed call: the API's error body (`error`, `message`, maybe `field`) and its status.
class Refused extends Error {
  constructor(status, body) {
    super((body && body.message) || `The API answered ${status}.`);
    this.status = status;
    this.body = body || {};
  }
}

// The API with the admin token. A 401 or 403 signs out (the token is wrong, or not the
// admin's); any other failure throws Refused.
async function call(method, path, body) {
  const mine = session;
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(`${api}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (e) {
    throw new Refused(0, { message: "Cannot reach the API. Try again in a moment." });
  }
  // Signed out meanwhile: nothing to show, the sign-out said why.
  if (mine !== session) throw new Refused(0, { error: "signed_out" });
  if (response.status === 401 || response.status === 403) {
    signOut(
      response.status === 401
        ? "The API refused this token (401). Sign in with the admin token."
        : "This token is not the admin's (403): a buyer's token cannot open the console.",
      "bad",
    );
    throw new Refused(response.status, { error: "signed_out" });
  }
  if (!response.ok) throw new Refused(response.status, await response.json().catch(() => null));
  return response;
}

async function json(method, path, body) {
  return (await call(method, path, body)).json();
}

// An action's failure in the status line, unless it signed out (which said why).
function report(error) {
  if (error.body.error !== "signed_out") say(error.message, "bad");
}

// ---- Signing in and out ----

function signIn() {
  session++;
  $("sign-in").hidden = true;
  $("office").hidden = false;
  say("Loading the sales…");
  startEditing(null);
  watch(session);
}

function signOut(message, tone) {
  session++;
  token = "";
  sessionStorage.removeItem(ADMIN_TOKEN_KEY);
  // Nothing of the merchant's stays on the page.
  sales = [];
  salesNext = null;
  lines = new Map();
  ordersOf = null;
  $("sales").tBodies[0].replaceChildren();
  $("orders").tBodies[0].replaceChildren();
  $("orders-panel").hidden = true;
  $("office").hidden = true;
  $("sign-in").hidden = false;
  $("token").focus();
  say(message, tone);
}

$("sign-in").addEventListener("submit", (event) => {
  event.preventDefault();
  const pasted = $("token").value.trim();
  $("token").value = "";
  if (!pasted) {
    say("Paste the admin token first.", "bad");
    return;
  }
  token = pasted;
  sessionStorage.setItem(ADMIN_TOKEN_KEY, token);
  signIn();
});
$("sign-out").addEventListener("click", () => signOut("Signed out."));

// ---- The sales ----

async function watch(mine) {
  while (mine === session) {
    await refresh();
    await new Promise((done) => setTimeout(done, REFRESH_MS));
  }
}

// The sales shown so far, again (one page as long as they are), and the line lengths.
async function refresh() {
  const mine = ++refreshes;
  const limit = Math.min(1000, Math.max(SALES_PAGE, Math.ceil(sales.length / SALES_PAGE) * SALES_PAGE));
  try {
    const [page, metrics] = await Promise.all([
      json("GET", `/vouchers?limit=${limit}`),
      // The line's length is an extra: the sales show without it.
      call("GET", "/metrics").then((response) => response.text(), () => null),
    ]);
    if (mine !== refreshes) return;
    sales = page.vouchers;
    salesNext = page.next;
    if (metrics !== null) lines = lineLengths(metrics);
    renderSales();
    $("updated").textContent = `Updated ${new Date().toLocaleTimeString()}.`;
    if ($("status").textContent === "Loading the sales…") say("");
  } catch (error) {
    if (mine === refreshes) report(error);
  }
}

function lineLengths(text) {
  const lengths = new Map();
  for (const { name, labels, value } of parseMetrics(text)) {
    if (name === "seckill_line_length") lengths.set(labels.voucher_id, value);
  }
  return lengths;
}

async function moreSales() {
  try {
    const page = await json("GET", `/vouchers?limit=${SALES_PAGE}&after=${salesNext}`);
    sales.push(...page.vouchers);
    salesNext = page.next;
    renderSales();
  } catch (error) {
    report(error);
  }
}

function cell(row, name, label, text) {
  const td = row.insertCell();
  td.className = name;
  td.dataset.label = label;
  td.textContent = text;
  return td;
}

function button(label, action, name, onClick) {
  const element = document.createElement("button");
  element.type = "button";
  element.className = "secondary";
  element.dataset.action = action;
  element.textContent = label;
  element.setAttribute("aria-label", `${label}: ${name}`);
  element.addEventListener("click", onClick);
  return element;
}

function renderSales() {
  // The rows are drawn anew: the button that had the focus gets it back.
  const focused = document.activeElement.closest("#sales tr[data-id]") && {
    id: document.activeElement.closest("tr").dataset.id,
    action: document.activeElement.dataset.action,
  };
  const body = $("sales").tBodies[0];
  body.replaceChildren();
  for (const sale of sales) {
    const row = body.insertRow();
    row.dataset.id = sale.id;
    cell(row, "title", "Title", sale.title);
    cell(row, "status", "Status", sale.status);
    cell(row, "left", "Units left", `${sale.remaining} of ${sale.stock}`);
    cell(row, "orders", "Orders", sale.orders ?? "");
    cell(row, "line", "In line", lines.get(String(sale.id)) ?? "");
    const actions = cell(row, "actions", "Actions", "");
    actions.append(button("Edit", "edit", sale.title, () => startEditing(sale.id)));
    if (sale.status !== "ended") {
      actions.append(button("End now", "end", sale.title, () => endSale(sale.id)));
    }
    actions.append(button("Orders", "orders", sale.title, () => showOrders(sale.id)));
    const live = document.createElement("a");
    live.href = `/shop/live#${sale.id}`;
    live.dataset.action = "live";
    live.textContent = "Live view";
    live.setAttribute("aria-label", `Live view: ${sale.title}`);
    actions.append(live);
  }
  if (focused) {
    body.querySelector(`tr[data-id="${focused.id}"] [data-action="${focused.action}"]`)?.focus();
  }
  $("more-sales").hidden = salesNext === null;
}

function saleById(id) {
  return sales.find((sale) => sale.id === id);
}

// The sale as an action's answer has it, in the list at once; the next refresh confirms.
function replaceSale(sale) {
  const at = sales.findIndex((listed) => listed.id === sale.id);
  if (at >= 0) sales[at] = { ...sales[at], ...sale };
  else sales.unshift(sale);
  renderSales();
}

async function endSale(id) {
  const sale = saleById(id);
  if (!sale || !confirm(`End “${sale.title}” now? Nobody can buy it after this.`)) return;
  try {
    replaceSale(await json("POST", `/vouchers/${id}/end`));
    say(`Sale ${id} has ended.`);
    if (editing && editing.id === id) startEditing(id);
    refresh();
  } catch (error) {
    report(error);
  }
}

// ---- Creating and editing ----

const pad = (n, width = 2) => String(n).padStart(width, "0");

// An RFC 3339 time as a datetime-local value, in the browser's time zone.
function toLocalInput(text) {
  if (!text) return "";
  const at = new Date(text);
  return (
    `${pad(at.getFullYear(), 4)}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}` +
    `T${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`
  );
}

// A datetime-local value (the browser's local time) as RFC 3339 with the browser's offset
// at that time; null when empty, undefined when no time.
function fromLocalInput(value) {
  if (!value) return null;
  const at = new Date(value);
  if (Number.isNaN(at.getTime())) return undefined;
  const seconds = value.length === 16 ? `${value}:00` : value.slice(0, 19);
  const offset = -at.getTimezoneOffset();
  const sign = offset < 0 ? "-" : "+";
  return `${seconds}${sign}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
}

// The form as the API's fields: texts as typed, numbers as numbers (NaN when not whole,
// null when empty), times in RFC 3339 (null when empty, undefined when no time).
function readForm() {
  const values = {};
  for (const field of TEXTS) values[field] = $(field).value;
  for (const field of NUMBERS) {
    const text = $(field).value.trim();
    values[field] = text === "" ? null : /^-?[0-9]+$/.test(text) ? Number(text) : NaN;
  }
  for (const field of TIMES) values[field] = fromLocalInput($(field).value);
  return values;
}

// What the API would refuse, field → what to say, by the API's rules (docs/openapi.yaml,
// NewVoucher). The API checks again: its 400 shows beside its field as these do.
function validate(values) {
  const problems = {};
  const whole = (field, low, high, what) => {
    const value = values[field];
    if (value === null || Number.isNaN(value) || value < low || value > high) {
      problems[field] = `${what}: a whole number from ${low.toLocaleString("en")} to ${high.toLocaleString("en")}.`;
    }
  };
  const characters = [...values.title].length;
  if (!values.title.trim() || characters > 128) {
    problems.title = `A title of 1 to 128 characters (${characters} now).`;
  }
  if ([...values.description].length > 1024) {
    problems.description = "At most 1,024 characters.";
  }
  whole("stock", 1, 10_000_000, "Units");
  whole("per_buyer", 1, 10, "Units a buyer may hold");
  whole("pay_within_s", 1, 604_800, "Seconds to pay");
  whole("draw_ms", 0, 60_000, "Milliseconds");
  whole("buckets", 1, 64, "Buckets");
  if (!problems.buckets && !problems.stock && values.buckets > values.stock) {
    problems.buckets = "At most one bucket a unit.";
  }
  if (!problems.buckets && !problems.draw_ms && values.draw_ms > 0 && values.buckets > 1) {
    problems.draw_ms = "A sale with a draw is one bucket.";
  }
  if (!problems.stock && !problems.draw_ms && values.draw_ms > 0 && values.stock > 100_000) {
    problems.stock = "A sale with a draw has at most 100,000 units.";
  }
  for (const field of ["begin_time", "end_time"]) {
    if (!values[field]) problems[field] = "A date and time.";
  }
  if (values.announce_at === undefined) problems.announce_at = "A date and time, or empty.";
  // A change leaves out what is empty: a listing time once set stays set.
  if (editing && filled.announce_at && values.announce_at === null) {
    problems.announce_at = "Once set, a listing time stays: set one at or before the opening.";
  }
  const time = (field) => Date.parse(values[field]);
  if (!problems.begin_time && !problems.end_time && time("end_time") <= time("begin_time")) {
    problems.end_time = "After the opening.";
  }
  if (!problems.begin_time && values.announce_at && time("announce_at") > time("begin_time")) {
    problems.announce_at = "At or before the opening.";
  }
  return problems;
}

function clearProblems() {
  $("form-error").textContent = "";
  for (const field of [...FIELDS, "units"]) {
    $(field).removeAttribute("aria-invalid");
    $(`${field}-error`).textContent = "";
  }
}

// Each problem beside its field (a field the form lacks: at the form's top); the first
// field at fault gets the focus.
function showProblems(problems) {
  let first = null;
  for (const [field, message] of Object.entries(problems)) {
    const input = $(field);
    if (input && $(`${field}-error`)) {
      input.setAttribute("aria-invalid", "true");
      $(`${field}-error`).textContent = message;
      first = first || input;
    } else {
      $("form-error").textContent = message;
    }
  }
  (first || $("form-error")).focus();
}

// The API's refusal of a form: beside the field it names, else at the form's top.
function showRefusal(error) {
  report(error);
  if (error.body.error === "signed_out") return;
  const field = error.body.field;
  showProblems({ [field && $(`${field}-error`) ? field : "form-error"]: error.message });
}

// The form filled from the sale of this id (null: a new sale, with the API's defaults).
function startEditing(id) {
  editing = id === null ? null : saleById(id) || null;
  const sale = editing || { pay_within_s: 900, per_buyer: 1, draw_ms: 0, buckets: 1 };
  clearProblems();
  for (const field of TEXTS) $(field).value = sale[field] ?? "";
  for (const field of NUMBERS) $(field).value = sale[field] ?? "";
  for (const field of TIMES) $(field).value = toLocalInput(sale[field]);
  const changeable =
    editing === null || editing.status === "upcoming"
      ? null
      : editing.status === "ended"
        ? CHANGEABLE_ONCE_ENDED
        : CHANGEABLE_ONCE_OPEN;
  for (const field of FIELDS) {
    // Buckets never change: a sale's keys are spread over them at its creation.
    $(field).disabled =
      editing !== null && (field === "buckets" || (changeable !== null && !changeable.has(field)));
  }
  filled = readForm();
  $("form-heading").textContent = editing ? `Edit “${editing.title}”` : "Create a sale";
  $("save").textContent = editing ? "Save" : "Create";
  $("cancel-edit").hidden = $("new-sale").hidden = !editing;
  $("add-stock").hidden = !editing || editing.status === "ended";
  $("units").value = "";
  if (editing) $("title").focus();
}

$("sale-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  clearProblems();
  const values = readForm();
  const problems = validate(values);
  if (Object.keys(problems).length) {
    showProblems(problems);
    say("Check the fields marked.", "bad");
    return;
  }
  let body = values;
  if (editing) {
    // Only what changed: the API refuses a change an open sale no longer takes, and a
    // field sent unchanged would be one.
    body = Object.fromEntries(
      FIELDS.filter((field) => values[field] !== filled[field]).map((field) => [field, values[field]]),
    );
    if (Object.keys(body).length === 0) {
      say("Nothing changed.");
      return;
    }
  } else {
    // Left out, the API takes its default (and announce_at, the sale's creation).
    body = Object.fromEntries(Object.entries(values).filter(([, value]) => value !== null));
  }
  const id = editing && editing.id;
  try {
    const sale = await json(id ? "PATCH" : "POST", id ? `/vouchers/${id}` : "/vouchers", body);
    replaceSale(sale);
    say(id ? `Sale ${id} saved.` : `Sale ${sale.id} created.`);
    startEditing(id ? sale.id : null);
    refresh();
  } catch (error) {
    showRefusal(error);
  }
});
$("cancel-edit").addEventListener("click", () => startEditing(null));
$("new-sale").addEventListener("click", () => {
  startEditing(null);
  $("title").focus();
});

// Stock is the sale's total units ever offered: the API is sent the new total, so that a
// second press of the same total (a double click, a retry) adds nothing more.
$("add-stock").addEventListener("submit", async (event) => {
  event.preventDefault();
  clearProblems();
  const sale = saleById(editing.id) || editing;
  const text = $("units").value.trim();
  const units = /^[0-9]+$/.test(text) ? Number(text) : 0;
  if (units < 1 || sale.stock + units > 10_000_000) {
    showProblems({ units: `A whole number from 1 to ${(10_000_000 - sale.stock).toLocaleString("en")}.` });
    return;
  }
  try {
    const updated = await json("PATCH", `/vouchers/${sale.id}`, { stock: sale.stock + units });
    replaceSale(updated);
    // The form keeps what is being typed in it, but its stock is the new one.
    editing = saleById(updated.id);
    $("stock").value = filled.stock = updated.stock;
    $("units").value = "";
    say(`Added ${units} units to sale ${sale.id}: ${updated.stock} in all.`);
    refresh();
  } catch (error) {
    report(error);
    if (error.body.error !== "signed_out") showProblems({ units: error.message });
  }
});

// ---- Orders ----

async function showOrders(id) {
  ordersOf = id;
  ordersNext = null;
  $("orders").tBodies[0].replaceChildren();
  const sale = saleById(id);
  $("orders-heading").textContent = `Orders of “${sale ? sale.title : id}”`;
  $("orders-panel").hidden = false;
  await moreOrders();
  $("orders-heading").scrollIntoView({ block: "nearest" });
}

async function moreOrders() {
  const id = ordersOf;
  const after = ordersNext === null ? "" : `&after=${ordersNext}`;
  try {
    const page = await json("GET", `/vouchers/${id}/orders?limit=${ORDERS_PAGE}${after}`);
    if (id !== ordersOf) return;
    const body = $("orders").tBodies[0];
    for (const order of page.orders) {
      const row = body.insertRow();
      cell(row, "order", "Order", order.order_id);
      cell(row, "user", "Buyer", order.user_id);
      cell(row, "status", "Status", order.status);
      cell(row, "quantity", "Units", order.quantity);
      cell(row, "created", "Created (UTC)", order.created_at);
    }
    ordersNext = page.next;
    $("more-orders").hidden = ordersNext === null;
  } catch (error) {
    report(error);
  }
}

// A plain link cannot carry the token: the CSV is fetched, then saved from a Blob. An
// answer holds a sale's orders up to a limit, its `Link` naming the rest, which a page on
// another origin cannot read: the next answer is asked after the last order until one
// holds none.
async function downloadOrders() {
  const id = ordersOf;
  try {
    const parts = [];
    let after = "";
    for (;;) {
      const text = await (await call("GET", `/vouchers/${id}/orders.csv${after}`)).text();
      const rows = text.slice(text.indexOf("\n") + 1);
      parts.push(parts.length ? rows : text); // the header row once
      if (!rows) break;
      const last = rows.trimEnd().split("\n").at(-1);
      after = `?after=${last.slice(0, last.indexOf(","))}`;
    }
    const blob = new Blob(parts, { type: "text/csv; charset=utf-8" });
    const url = URL.createObjectURL(blob);
    const link = document.createElement("a");
    link.href = url;
    link.download = `voucher-${id}-orders.csv`;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    say(`Saved voucher-${id}-orders.csv.`);
  } catch (error) {
    report(error);
  }
}

$("refresh").addEventListener("click", refresh);
$("more-sales").addEventListener("click", moreSales);
$("more-orders").addEventListener("click", moreOrders);
$("download").addEventListener("click", downloadOrders);

if (token) signIn();
else $("token").focus();
