// The sale page: polls the voucher, counts down to its start by the server's clock (the
// answer's `server_time`), offers as many units as the sale lets a buyer hold
// (`per_buyer`), and buys with the buyer's token, saying what happened in plain words.
"use strict";

const api = document.querySelector('meta[name="seckill-api"]').content;
const match = location.pathname.match(/^\/shop\/vouchers\/([1-9][0-9]*)$/);
const $ = (id) => document.getElementById(id);
const POLL_MS = 2000;
const MAX_RETRIES = 5;

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
  $("buy").disabled = buying || now === null || now < begin;
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

async function buy(retries = 0) {
  const token = $("token").value.trim();
  if (!token) {
    say("Sign in first: paste your buyer token.", "bad");
    return;
  }
  buying = true;
  render();
  let retryIn = null;
  // One unit is an empty body, as the API has always taken it.
  const units = Number($("quantity").value) || 1;
  const request = { method: "POST", headers: { Authorization: `Bearer ${token}` } };
  if (units > 1) {
    request.headers["Content-Type"] = "application/json";
    request.body = JSON.stringify({ quantity: units });
  }
  try {
    const response = await fetch(`${api}/vouchers/${match[1]}/orders`, request);
    const received = performance.now();
    const body = await response.json().catch(() => ({}));
    learnClock(response, body, received);
    drawAt = null;
    if (response.status === 202 && body.error === "in_draw") {
      // Entered: the results come at draw_at; ask again then, no sooner than Retry-After.
      drawAt = Date.parse(body.draw_at);
      retryIn = Math.max(1, parseInt(response.headers.get("Retry-After"), 10) || 1);
      retries = -1;
    } else if (response.status === 201) {
      say(
        body.quantity > 1
          ? `It's yours! ${body.quantity} units, order ${body.order_id}.`
          : `It's yours! Order ${body.order_id}.`,
        "good",
      );
      const now = serverNow();
      if (voucher && now !== null) payBy = now + voucher.pay_within_s * 1000;
    } else if (response.status === 409 && body.error === "sold_out" && body.position) {
      say(
        `You were not drawn, and every unit has gone. You're number ${body.position} in line for a unit given back: press again later.`,
        "bad",
      );
    } else if (response.status === 409 && body.error === "not_enough_left") {
      // Nothing was taken: offer what is left, for her to press again.
      $("quantity").value = String(body.left);
      say(`Only ${body.left} left. Press Buy again to take ${body.left}.`, "bad");
    } else if (response.status === 400 && body.error === "too_many_units") {
      say(`At most ${body.per_buyer} a buyer.`, "bad");
    } else if (response.status === 409) {
      say(
        {
          already_ordered: `Already yours: order ${body.order_id}.`,
          sold_out: "Sold out. Every unit has gone.",
          not_started: "Not started yet. Wait for the countdown.",
          ended: "The sale has ended.",
          order_expired: `Your order ${body.order_id} expired unpaid and went back on sale.`,
          order_cancelled: `Your order ${body.order_id} was cancelled.`,
        }[body.error] || body.message,
        body.error === "already_ordered" ? "good" : "bad",
      );
    } else if (response.status === 429 && retries < MAX_RETRIES) {
      retryIn = Math.max(1, parseInt(response.headers.get("Retry-After"), 10) || 1);
      say(`Busy. Trying again in ${retryIn} s…`);
    } else if (response.status === 429) {
      say("Still busy. Try again in a moment.", "bad");
    } else if (response.status === 401) {
      say("Your sign-in is not valid any more. Sign in again.", "bad");
    } else if (response.status === 403) {
      say("This account cannot buy.", "bad");
    } else if (response.status === 404) {
      say("No such voucher.", "bad");
    } else if (response.status === 503) {
      say("Something went wrong on our side. Try again.", "bad");
    } else {
      say(body.message || `Unexpected answer (${response.status}). Try again.`, "bad");
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

if (match) {
  $("sale").hidden = false;
  $("buy").addEventListener("click", () => buy());
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
