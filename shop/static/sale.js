// The sale page: polls the voucher, counts down to its start by the server's clock (the
// answer's `server_time`), offers as many units as the sale lets a buyer hold
// (`per_buyer`), and buys with the buyer's token, saying what happened in plain words.
// A buyer told sold out may join the sale's line: the page then polls her place until
// the line hands her a unit given back, and shows her order as a purchase's.
"use strict";

const api = document.querySelector('meta[name="seckill-api"]').content;
const match = location.pathname.match(/^\/shop\/vouchers\/([1-9][0-9]*)$/);
const $ = (id) => document.getElementById(id);
const POLL_MS = 2000;
const MAX_RETRIES = 5;
// How often a buyer in line asks for her place, unless Retry-After says longer.
const LINE_POLL_MS = 3000;

// Server time minus performance.now(), so the countdown ignores the visitor's clock (and
// any change to it). The server reads its clock (`server_time`, to the millisecond, by the
// clock admission decides by) before its answer arrives, so `server_time - arrival` never
// overshoots the offset: the largest such estimate is the closest. It errs late by at
// most the answer's trip back, so Buy never lights up before admission would take it.
// Not the middle of [server_time - arrival, server_time - sending]: a cache may answer
// with a copy up to a second old (max-age=1), which would pull that early; here such a
// copy only gives a smaller estimate, which is dropped.
let clockOffset = null;
let clockFromServerTime = false;
let voucher = null;
let buying = false;
// When the winner's order expires unless she pays, by the server's clock.
let payBy = null;
// When the opening draw the buyer entered gives its results (unix ms), while she waits.
let drawAt = null;
// The units of her last press, which joining the line asks for again.
let pressedUnits = 1;
// While she is in the sale's line: the token she joined with, and the next look's timer.
let line = null;

// `received`: performance.now() when the answer's headers arrived.
function learnClock(response, body, received) {
  const exact = typeof (body && body.server_time) === "string";
  // An older API has no server_time: `Date`, which has whole seconds (cut down, so also
  // never ahead) but is the component's clock. Never mixed with server_time, as the two
  // clocks may differ: the first server_time replaces what `Date` said.
  if (clockFromServerTime && !exact) return;
  const time = Date.parse(exact ? body.server_time : response.headers.get("Date"));
  if (Number.isNaN(time)) return;
  const estimate = time - received;
  if (clockOffset === null || exact !== clockFromServerTime || estimate > clockOffset) {
    clockOffset = estimate;
    clockFromServerTime = exact;
  }
}

function serverNow() {
  return clockOffset === null ? null : performance.now() + clockOffset;
}

function say(text, tone) {
  $("outcome").textContent = text;
  $("outcome").className = tone || "";
}

function duration(ms) {
  const total = Math.ceil(ms / 1000);
  const days = Math.floor(total / 86400);
  const pad = (n) => String(n).padStart(2, "0");
  const clock = `${pad(Math.floor(total / 3600) % 24)}:${pad(Math.floor(total / 60) % 60)}:${pad(total % 60)}`;
  return days > 0 ? `${days}d ${clock}` : clock;
}

function render() {
  if (!voucher) return;
  const now = serverNow();
  const begin = Date.parse(voucher.begin_time);
  const end = Date.parse(voucher.end_time);
  let countdown;
  if (now === null) countdown = "";
  else if (now < begin) countdown = `Starts in ${duration(begin - now)}`;
  else if (now < end) countdown = `On sale now, ends in ${duration(end - now)}`;
  else countdown = "The sale has ended";
  $("countdown").textContent = countdown;
  $("buy").disabled = buying || line !== null || now === null || now < begin;
  if (drawAt !== null && now !== null) {
    const at = new Date(drawAt).toLocaleTimeString();
    say(
      now < drawAt
        ? `You're in the draw: results at ${at} (in ${duration(drawAt - now)}).`
        : `You're in the draw: results at ${at}. Drawing…`,
      "good",
    );
  }
  if (payBy !== null && now !== null) {
    $("payment").textContent =
      now < payBy ? `Pay within ${duration(payBy - now)}` : "Unpaid in time: this order has expired.";
  }
}

// The units a buyer may choose: 1 to the sale's per_buyer; nothing to choose at 1.
function offerUnits(perBuyer) {
  const select = $("quantity");
  if (select.options.length !== perBuyer) {
    const chosen = Math.min(Number(select.value) || 1, perBuyer);
    select.replaceChildren(
      ...Array.from({ length: perBuyer }, (_, i) => new Option(String(i + 1), String(i + 1))),
    );
    select.value = String(chosen);
  }
  select.hidden = $("quantity-label").hidden = perBuyer <= 1;
}

async function poll() {
  try {
    const response = await fetch(`${api}/vouchers/${match[1]}`);
    const received = performance.now();
    const body = await response.json().catch(() => null);
    learnClock(response, body, received);
    if (response.status === 404) {
      $("title").textContent = "No such voucher";
      return;
    }
    if (!response.ok || !body) return; // keep what is shown; the next poll tries again
    voucher = body;
    $("title").textContent = voucher.title;
    $("description").textContent = voucher.description;
    $("left").textContent =
      voucher.remaining === 0 ? "None left" : `${voucher.remaining} of ${voucher.stock} left`;
    offerUnits(voucher.per_buyer || 1);
    render();
  } catch (e) {
    // Offline for a moment: the next poll tries again.
  }
}

// A buyer's request to the sale's `path` (`orders`, `line`), with her units (one unit is
// an empty body, as the API has always taken it); its answer's status, JSON body (`{}`
// when none) and Retry-After in seconds (at least 1).
async function call(method, path, token, units = 1) {
  const request = { method, headers: { Authorization: `Bearer ${token}` } };
  if (units > 1) {
    request.headers["Content-Type"] = "application/json";
    request.body = JSON.stringify({ quantity: units });
  }
  const response = await fetch(`${api}/vouchers/${match[1]}/${path}`, request);
  const received = performance.now();
  const body = await response.json().catch(() => ({}));
  learnClock(response, body, received);
  const retryAfter = Math.max(1, parseInt(response.headers.get("Retry-After"), 10) || 1);
  return { status: response.status, body, retryAfter };
}

// Her order, from a purchase's 201 or the line's `ordered`; she pays within the sale's
// pay_within_s from now.
function showOrder(order) {
  say(
    order.quantity > 1
      ? `It's yours! ${order.quantity} units, order ${order.order_id}.`
      : `It's yours! Order ${order.order_id}.`,
    "good",
  );
  const now = serverNow();
  if (voucher && now !== null) payBy = now + voucher.pay_within_s * 1000;
}

// What a refusal the purchase and the line share means to her.
function sayRefusal(status, body) {
  if (status === 409) {
    say(
      {
        already_ordered: `Already yours: order ${body.order_id}.`,
        sold_out: "Sold out. Every unit has gone.",
        not_started: "Not started yet. Wait for the countdown.",
        ended: "The sale has ended.",
        order_expired: `Your order ${body.order_id} expired unpaid and went back on sale.`,
        order_cancelled: `Your order ${body.order_id} was cancelled.`,
        no_line: "This sale has no line.",
      }[body.error] || body.message,
      body.error === "already_ordered" ? "good" : "bad",
    );
  } else if (status === 429) {
    say("Still busy. Try again in a moment.", "bad");
  } else if (status === 401) {
    say("Your sign-in is not valid any more. Sign in again.", "bad");
  } else if (status === 403) {
    say("This account cannot buy.", "bad");
  } else if (status === 404) {
    say("No such voucher.", "bad");
  } else if (status === 503) {
    say("Something went wrong on our side. Try again.", "bad");
  } else {
    say(body.message || `Unexpected answer (${status}). Try again.`, "bad");
  }
}

function isLive() {
  const now = serverNow();
  return (
    voucher !== null &&
    now !== null &&
    Date.parse(voucher.begin_time) <= now &&
    now < Date.parse(voucher.end_time)
  );
}

// The line's buttons: Join while she may join it, Leave while she is in it.
function offerLine(join, leave) {
  $("join").hidden = !join;
  $("leave").hidden = !leave;
}

function signedIn() {
  const token = $("token").value.trim();
  if (!token) say("Sign in first: paste your buyer token.", "bad");
  return token;
}

async function buy(retries = 0) {
  const token = signedIn();
  if (!token) return;
  buying = true;
  offerLine(false, false);
  render();
  let retryIn = null;
  const units = Number($("quantity").value) || 1;
  pressedUnits = units;
  try {
    const { status, body, retryAfter } = await call("POST", "orders", token, units);
    drawAt = null;
    if (status === 202 && body.error === "in_draw") {
      // Entered: the results come at draw_at; ask again then, no sooner than Retry-After.
      drawAt = Date.parse(body.draw_at);
      retryIn = retryAfter;
      retries = -1;
    } else if (status === 201) {
      showOrder(body);
    } else if (status === 409 && body.error === "sold_out" && body.position) {
      // Not drawn: she is in the draw's line already; follow her place in it.
      say(
        `You were not drawn, and every unit has gone. You're number ${body.position} in line for a unit given back.`,
        "bad",
      );
      watchLine(token, 0);
    } else if (status === 409 && body.error === "not_enough_left") {
      // Nothing was taken: offer what is left, for her to press again, or the line.
      $("quantity").value = String(body.left);
      say(`Only ${body.left} left. Press Buy again to take ${body.left}, or join the line.`, "bad");
      offerLine(isLive(), false);
    } else if (status === 400 && body.error === "too_many_units") {
      say(`At most ${body.per_buyer} a buyer.`, "bad");
    } else if (status === 429 && retries < MAX_RETRIES) {
      retryIn = retryAfter;
      say(`Busy. Trying again in ${retryIn} s…`);
    } else {
      sayRefusal(status, body);
      offerLine(status === 409 && body.error === "sold_out" && isLive(), false);
    }
  } catch (e) {
    say("Could not reach the shop. Check your connection and try again.", "bad");
  }
  if (retryIn !== null) {
    setTimeout(() => buy(retries + 1), retryIn * 1000);
    return;
  }
  buying = false;
  render();
  poll();
}

// "about 40 s", "about 3 min", "about 2 h" to wait.
function roughly(seconds) {
  if (seconds < 90) return `${Math.max(1, seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
}

// What a look at the line (GET) answered: her place, her order, or she is out. Returns
// the ms until the next look while she waits, else null.
function followLine(status, body, retryAfter) {
  // Every LINE_POLL_MS, or after Retry-After when that says longer.
  const next = Math.max(LINE_POLL_MS, retryAfter * 1000);
  if (status === 200 && body.status === "waiting") {
    sayPlace(body);
    return next;
  }
  // Busy, or a moment's trouble on our side: she keeps her place; ask again later.
  if (status === 429 || status === 503) return next;
  if (status === 200 && body.status === "ordered") {
    showOrder(body);
    offerLine(false, false);
  } else if (status === 200 && body.status === "not_in_line") {
    say("You are not in the line.", "bad");
    offerLine(isLive(), false);
  } else {
    sayRefusal(status, body);
    offerLine(false, false);
  }
  return null;
}

function sayPlace(place) {
  const wait = place.estimate_s === null ? "" : `, about ${roughly(place.estimate_s)} to wait`;
  say(`You are number ${place.position} in line (${place.ahead} ahead${wait}).`, "good");
}

// Follows her place in the line: a look in `delay` ms, and again until she is out.
function watchLine(token, delay) {
  stopWatching();
  line = { token, timer: setTimeout(lookAtLine, delay) };
  offerLine(false, true);
  render();
}

function stopWatching() {
  if (line) clearTimeout(line.timer);
  line = null;
  render();
}

async function lookAtLine() {
  const watched = line;
  let next = LINE_POLL_MS;
  try {
    const { status, body, retryAfter } = await call("GET", "line", watched.token);
    if (line !== watched) return; // she left meanwhile
    next = followLine(status, body, retryAfter);
  } catch (e) {
    // Offline for a moment: ask again later.
  }
  if (line !== watched) return;
  if (next === null) stopWatching();
  else watched.timer = setTimeout(lookAtLine, next);
}

// Joins the line for the units of her last press: ordered at once when units were left
// and nobody waited, else her place, followed from then on.
async function joinLine() {
  const token = signedIn();
  if (!token) return;
  offerLine(false, false);
  try {
    const { status, body, retryAfter } = await call("POST", "line", token, pressedUnits);
    if (status === 201) {
      showOrder(body);
    } else if (status === 202) {
      sayPlace(body);
      watchLine(token, Math.max(LINE_POLL_MS, retryAfter * 1000));
    } else {
      sayRefusal(status, body);
      offerLine(status !== 409 && status !== 404 && isLive(), false);
    }
  } catch (e) {
    say("Could not reach the shop. Check your connection and try again.", "bad");
    offerLine(true, false);
  }
  poll();
}

async function leaveLine() {
  const watched = line;
  if (!watched) return;
  stopWatching();
  offerLine(false, false);
  try {
    const { status, body } = await call("DELETE", "line", watched.token);
    if (status === 200 && body.status === "left") say("You left the line.");
    else if (status === 200) say("You are not in the line.");
    else sayRefusal(status, body);
  } catch (e) {
    say("Could not reach the shop. Check your connection and try again.", "bad");
  }
  offerLine(isLive(), false);
}

if (match) {
  $("sale").hidden = false;
  $("buy").addEventListener("click", () => buy());
  $("join").addEventListener("click", joinLine);
  $("leave").addEventListener("click", leaveLine);
  poll();
  setInterval(poll, POLL_MS);
  setInterval(render, 250);
} else {
  $("pick").hidden = false;
  $("pick").addEventListener("submit", (event) => {
    event.preventDefault();
    location.pathname = `/shop/vouchers/${$("voucher-id").value}`;
  });
}
