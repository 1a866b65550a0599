// The Key_Shared hash ring as an SVG: each consumer's hash ranges in its own colour, draining hashes
// as markers just outside the ring in the colour of the consumer they wait for. Pure drawing: the
// caller passes what the subscription's stats say and gets an element back.
"use strict";

const MagnetarRing = (() => {
  const NS = "http://www.w3.org/2000/svg";
  // Sticky key hashes of Key_Shared selectors lie in [0, 65535] (Pulsar's STICKY and consistent
  // hashing ranges): the ring is drawn over 65536 slots.
  const HASH_SLOTS = 65536;
  const PALETTE = ["#3451b2", "#e07b39", "#1a9c6b", "#b4366a", "#7a5cc7", "#c9a227", "#2394b8", "#8a4b2a",
                   "#5b8a1e", "#d0493f", "#4a6076", "#c46ec8"];

  function svg(tag, attrs, parent) {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (parent) parent.appendChild(node);
    return node;
  }

  function colorOf(index) {
    return PALETTE[index % PALETTE.length];
  }

  function point(cx, cy, r, hash) {
    const angle = (hash / HASH_SLOTS) * 2 * Math.PI - Math.PI / 2;
    return [cx + r * Math.cos(angle), cy + r * Math.sin(angle)];
  }

  // An arc over hashes [start, end] inclusive.
  function arc(cx, cy, r, start, end) {
    const span = end + 1 - start;
    if (span >= HASH_SLOTS) {
      const [x, y] = point(cx, cy, r, 0);
      const [x2, y2] = point(cx, cy, r, HASH_SLOTS / 2);
      return `M ${x} ${y} A ${r} ${r} 0 1 1 ${x2} ${y2} A ${r} ${r} 0 1 1 ${x} ${y}`;
    }
    const [x1, y1] = point(cx, cy, r, start);
    const [x2, y2] = point(cx, cy, r, end + 1);
    const large = span > HASH_SLOTS / 2 ? 1 : 0;
    return `M ${x1.toFixed(2)} ${y1.toFixed(2)} A ${r} ${r} 0 ${large} 1 ${x2.toFixed(2)} ${y2.toFixed(2)}`;
  }

  function ownerOf(consumers, hash) {
    for (const consumer of consumers) {
      if (consumer.ranges.some(([start, end]) => start <= hash && hash <= end)) return consumer;
    }
    return null;
  }

  // consumers: [{name, color, ranges: [[start, end], ...], draining: [{hash, unackMsgs, blockedAttempts}]}]
  function draw(consumers, size) {
    const cx = size / 2;
    const cy = size / 2;
    const r = size / 2 - 48;
    const root = svg("svg", { class: "ring", width: size, height: size, viewBox: `0 0 ${size} ${size}`,
                              role: "img", "aria-label": "Key_Shared hash ring" });
    svg("circle", { class: "unowned", cx, cy, r }, root);
    for (const consumer of consumers) {
      for (const [start, end] of consumer.ranges) {
        const path = svg("path", { class: "range", d: arc(cx, cy, r, start, end), stroke: consumer.color,
                                   "data-consumer": consumer.name, "data-start": start, "data-end": end }, root);
        svg("title", {}, path).textContent = `${consumer.name}: [${start}, ${end}]`;
      }
    }
    for (const [hash, label] of [[0, "0"], [16384, "16384"], [32768, "32768"], [49152, "49152"]]) {
      const [x, y] = point(cx, cy, r - 42, hash);
      const text = svg("text", { x, y, "text-anchor": "middle", "dominant-baseline": "middle" }, root);
      text.textContent = label;
    }
    for (const holder of consumers) {
      for (const draining of holder.draining) {
        const owner = ownerOf(consumers, draining.hash);
        const group = svg("g", { class: "draining", "data-hash": draining.hash, "data-waits-for": holder.name,
                                 "data-owner": owner ? owner.name : "" }, root);
        const [x1, y1] = point(cx, cy, r + 15, draining.hash);
        const [x2, y2] = point(cx, cy, r + 30, draining.hash);
        svg("line", { x1, y1, x2, y2 }, group);
        svg("circle", { cx: x2, cy: y2, r: 6, fill: holder.color }, group);
        svg("title", {}, group).textContent =
          `hash ${draining.hash}: ${owner ? owner.name : "nobody"} waits for ${holder.name} ` +
          `(${draining.unackMsgs} unacked, ${draining.blockedAttempts} blocked attempts)`;
      }
    }
    const total = consumers.reduce((n, c) => n + c.draining.length, 0);
    const centre = svg("text", { x: cx, y: cy - 8, "text-anchor": "middle" }, root);
    centre.textContent = `${consumers.length} consumer${consumers.length === 1 ? "" : "s"}`;
    const drainingText = svg("text", { x: cx, y: cy + 10, "text-anchor": "middle" }, root);
    drainingText.textContent = `${total} draining hash${total === 1 ? "" : "es"}`;
    return root;
  }

  return { draw, colorOf, ownerOf };
})();
