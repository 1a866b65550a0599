// The console's pages. Everything shown is read from the broker's /admin/v2 API and /metrics, with the
// credentials typed into the page (kept in sessionStorage), every POLL_MS while the page is visible.
"use strict";

(() => {
  // Two seconds keeps the pages current at a cost the broker does not feel (docs/console.md measures
  // it); the rate windows of the stats are at least a second long, so polling faster shows nothing new.
  const POLL_MS = 2000;
  // The charts show what the page saw since it opened, up to this long: the broker keeps no history.
  const HISTORY_MS = 5 * 60 * 1000;
  const AUTH_KEY = "magnetar-console-authorization";
  const PEEK_MAX = 20;
  const PAYLOAD_CHARS_MAX = 400;

  const main = document.getElementById("page");
  const banner = document.getElementById("banner");
  const liveBadge = document.getElementById("live");

  // ---------------------------------------------------------------------------------------- DOM

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (value === true) node.setAttribute(key, "");
      else node.setAttribute(key, String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(node, child);
      else node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  function fill(node, ...children) {
    node.replaceChildren();
    append(node, children);
  }

  function table(columns, rows, empty) {
    const head = el("tr", {}, columns.map(([label, cls]) => el("th", { class: cls }, label)));
    const body = rows.length
      ? rows.map((cells, index) => el("tr", { "data-row": index },
          cells.map((cell, i) => el("td", { class: columns[i][1] }, cell))))
      : [el("tr", {}, el("td", { class: "empty", colspan: columns.length }, empty || "none"))];
    return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
  }

  function card(label, value, field) {
    return el("div", { class: "card" }, el("div", { class: "label" }, label),
              el("div", { class: "value", "data-field": field }, value));
  }

  // ---------------------------------------------------------------------------------------- format

  function rate(n) {
    if (n === undefined || n === null) return "–";
    if (n < 10) return n.toFixed(2);
    if (n < 1000) return n.toFixed(1);
    return Math.round(n).toLocaleString("en-US");
  }

  function count(n) {
    return n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US");
  }

  function bytes(n) {
    if (n === undefined || n === null || n < 0) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let value = n;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
  }

  function duration(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    if (d) return `${d}d ${h}h ${m}m`;
    if (h) return `${h}h ${m}m`;
    return `${m}m ${s % 60}s`;
  }

  const enc = encodeURIComponent;

  // ---------------------------------------------------------------------------------------- HTTP

  class HttpError extends Error {
    constructor(status, reason) {
      super(`${status}: ${reason}`);
      this.status = status;
      this.reason = reason;
    }
  }

  async function call(method, path, body) {
    const headers = {};
    const auth = sessionStorage.getItem(AUTH_KEY);
    if (auth) headers.Authorization = auth;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    if (!response.ok) {
      let reason = response.statusText;
      const text = await response.text();
      try {
        reason = JSON.parse(text).reason || reason;
      } catch (_notJson) {
        const title = /<title>(.*?)<\/title>/i.exec(text);
        if (title) reason = title[1];
      }
      if (response.status === 401) showSignIn();
      throw new HttpError(response.status, reason);
    }
    return response;
  }

  const getJson = async (path) => (await call("GET", path)).json();

  // Prometheus text format: [{name, labels, value}], comments skipped.
  async function getMetrics() {
    const text = await (await call("GET", "/metrics")).text();
    const samples = [];
    const line = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/;
    const label = /(\w+)="((?:[^"\\]|\\.)*)"/g;
    for (const row of text.split("\n")) {
      if (!row || row.startsWith("#")) continue;
      const match = line.exec(row);
      if (!match) continue;
      const labels = {};
      for (const [, key, value] of (match[2] || "").matchAll(label)) labels[key] = value.replace(/\\(.)/g, "$1");
      samples.push({ name: match[1], labels, value: Number(match[3]) });
    }
    return samples;
  }

  function sum(samples, name, where) {
    return samples.filter((s) => s.name === name && (!where || where(s.labels))).reduce((n, s) => n + s.value, 0);
  }

  // ---------------------------------------------------------------------------------------- sign-in, banner, confirm

  const signin = document.getElementById("signin");
  const signout = document.getElementById("signout");

  function showSignIn() {
    signin.hidden = false;
    signout.hidden = !sessionStorage.getItem(AUTH_KEY);
  }

  signin.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = document.getElementById("signin-token").value.trim();
    const user = document.getElementById("signin-user").value;
    const password = document.getElementById("signin-password").value;
    if (token) sessionStorage.setItem(AUTH_KEY, `Bearer ${token}`);
    else if (user) sessionStorage.setItem(AUTH_KEY, `Basic ${btoa(`${user}:${password}`)}`);
    else return;
    for (const id of ["signin-token", "signin-user", "signin-password"]) document.getElementById(id).value = "";
    signin.hidden = true;
    signout.hidden = false;
    flash("");
    route();
  });

  signout.addEventListener("click", () => {
    sessionStorage.removeItem(AUTH_KEY);
    signout.hidden = true;
    route();
  });

  function flash(message, ok) {
    banner.textContent = message;
    banner.hidden = !message;
    banner.className = ok ? "ok" : "";
  }

  const dialog = document.getElementById("confirm");

  function confirmAction(text) {
    document.getElementById("confirm-text").textContent = text;
    dialog.returnValue = "";
    dialog.showModal();
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    });
  }

  // Runs a change the user asked for, after confirmation; says what happened, then refreshes the page.
  async function act(question, method, path, body, done) {
    if (!(await confirmAction(question))) return;
    try {
      await call(method, path, body);
      flash(done, true);
    } catch (error) {
      flash(error instanceof HttpError ? `Refused (${error.status}): ${error.reason}` : String(error));
      return;
    }
    if (current) current.poke();
  }

  // ---------------------------------------------------------------------------------------- charts

  const history = new Map();

  function record(key, rateIn, rateOut) {
    const now = Date.now();
    const samples = history.get(key) || [];
    samples.push({ t: now, in: rateIn, out: rateOut });
    while (samples.length && samples[0].t < now - HISTORY_MS) samples.shift();
    history.set(key, samples);
    return samples;
  }

  function svgNode(tag, attrs, parent) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  // Rates in and out over the samples, on a common scale; axes only when `axes`.
  function chart(samples, width, height, axes) {
    const root = svgNode("svg", { class: axes ? "chart" : "spark", width, height, viewBox: `0 0 ${width} ${height}` });
    const pad = axes ? 24 : 1;
    const top = Math.max(1, ...samples.map((s) => Math.max(s.in, s.out)));
    const now = Date.now();
    const x = (t) => pad + ((t - (now - HISTORY_MS)) / HISTORY_MS) * (width - pad - 2);
    const y = (v) => height - pad / 2 - (v / top) * (height - pad);
    for (const side of ["in", "out"]) {
      if (!samples.length) continue;
      const points = samples.map((s) => `${x(s.t).toFixed(1)},${y(s[side]).toFixed(1)}`).join(" ");
      svgNode("polyline", { class: side, points, fill: "none", "stroke-width": axes ? 1.6 : 1.2 }, root);
    }
    if (axes) {
      svgNode("text", { x: 2, y: 10 }, root).textContent = `${rate(top)}/s`;
      svgNode("text", { x: 2, y: height - 2 }, root).textContent = "0";
      svgNode("text", { x: width - 2, y: height - 2, "text-anchor": "end" }, root).textContent = "now";
      svgNode("text", { x: pad, y: height - 2 }, root).textContent = "−5 min";
    }
    return root;
  }

  function chartPanel(samples) {
    return el("div", { class: "panel" },
      el("div", { class: "muted" }, "messages per second: ", el("span", { class: "legend-in" }, "■ in"), " ",
         el("span", { class: "legend-out" }, "■ out"), " (since this page opened)"),
      chart(samples, 560, 120, true));
  }

  // ---------------------------------------------------------------------------------------- pages

  // A page is {root, refresh}: refresh() reads the broker and redraws the live parts of root.

  function overviewPage() {
    const root = el("div", {});
    let identity = null;
    async function loadIdentity() {
      const found = { broker: "–", serviceUrl: "–", cluster: "–", mode: "–" };
      try {
        const leader = await getJson("/admin/v2/brokers/leaderBroker");
        found.broker = leader.brokerId;
        found.serviceUrl = leader.serviceUrl;
      } catch (_refused) { /* a tenant admin may not read broker calls */ }
      try {
        const runtime = await getJson("/admin/v2/brokers/configuration/runtime");
        found.cluster = runtime.clusterName;
        found.mode = runtime.keySharedOrderingMode;
      } catch (_refused) { /* as above */ }
      return found;
    }
    async function refresh() {
      identity = identity || (await loadIdentity());
      const metrics = await getMetrics();
      const started = sum(metrics, "process_start_time_seconds");
      const rateIn = sum(metrics, "pulsar_rate_in");
      const rateOut = sum(metrics, "pulsar_rate_out");
      const samples = record("broker", rateIn, rateOut);
      const topics = new Set(metrics.filter((s) => s.name === "pulsar_storage_size").map((s) => s.labels.topic));
      const links = new Map();
      for (const s of metrics.filter((m) => m.name.startsWith("pulsar_replication_") && m.labels.remote_cluster)) {
        const link = links.get(s.labels.remote_cluster) || { topics: new Set(), backlog: 0, delay: 0, rateOut: 0, connected: 0 };
        link.topics.add(s.labels.topic);
        if (s.name === "pulsar_replication_backlog") link.backlog += s.value;
        if (s.name === "pulsar_replication_delay_in_seconds") link.delay = Math.max(link.delay, s.value);
        if (s.name === "pulsar_replication_rate_out") link.rateOut += s.value;
        if (s.name === "pulsar_replication_connected_count") link.connected += s.value;
        links.set(s.labels.remote_cluster, link);
      }
      fill(root,
        el("h1", {}, "Overview"),
        el("div", { class: "cards" },
          card("broker", identity.broker, "broker"),
          card("cluster", identity.cluster, "cluster"),
          card("Key_Shared ordering", identity.mode, "mode"),
          card("uptime", started ? duration(Date.now() / 1000 - started) : "–", "uptime"),
          card("msg/s in", rate(rateIn), "rate-in"),
          card("msg/s out", rate(rateOut), "rate-out"),
          card("bytes/s in", bytes(sum(metrics, "pulsar_throughput_in")), "throughput-in"),
          card("bytes/s out", bytes(sum(metrics, "pulsar_throughput_out")), "throughput-out"),
          card("storage", bytes(sum(metrics, "pulsar_storage_size")), "storage"),
          card("backlog (entries)", count(sum(metrics, "pulsar_msg_backlog")), "backlog"),
          card("loaded topics", count(topics.size), "topics"),
          card("producers", count(sum(metrics, "pulsar_producers_count")), "producers"),
          card("consumers", count(sum(metrics, "pulsar_consumers_count")), "consumers"),
          card("connections", count(sum(metrics, "pulsar_active_connections")), "connections")),
        el("h2", {}, "Rates"),
        chartPanel(samples),
        el("h2", {}, "Brokers"),
        table([["broker"], ["service URL"], ["cluster"]], [[identity.broker, identity.serviceUrl, identity.cluster]]),
        el("h2", {}, "Replication"),
        table([["remote cluster"], ["topics", "num"], ["connected", "num"], ["backlog (entries)", "num"],
               ["delay (s)", "num"], ["msg/s out", "num"]],
              [...links].map(([remote, link]) => [remote, count(link.topics.size),
                `${link.connected}/${link.topics.size}`, count(link.backlog), rate(link.delay), rate(link.rateOut)]),
              "no replication links on the loaded topics"));
    }
    return { root, refresh };
  }

  function namespaceFigures(metrics) {
    const figures = new Map();
    const get = (ns) => figures.get(ns) || figures.set(ns, { in: 0, out: 0, backlog: 0, storage: 0, producers: 0,
                                                             consumers: 0, topics: new Set() }).get(ns);
    for (const s of metrics) {
      if (!s.labels.namespace || s.labels.subscription !== undefined || s.labels.remote_cluster !== undefined) continue;
      const f = get(s.labels.namespace);
      if (s.name === "pulsar_rate_in") f.in += s.value;
      else if (s.name === "pulsar_rate_out") f.out += s.value;
      else if (s.name === "pulsar_msg_backlog") f.backlog += s.value;
      else if (s.name === "pulsar_storage_size") { f.storage += s.value; f.topics.add(s.labels.topic); }
      else if (s.name === "pulsar_producers_count") f.producers += s.value;
      else if (s.name === "pulsar_consumers_count") f.consumers += s.value;
    }
    return figures;
  }

  function tenantsPage() {
    const root = el("div", {});
    async function refresh() {
      const [tenants, metrics] = await Promise.all([getJson("/admin/v2/tenants"), getMetrics()]);
      const namespaces = (await Promise.all(tenants.map((t) => getJson(`/admin/v2/namespaces/${enc(t)}`)))).flat();
      const figures = namespaceFigures(metrics);
      const rows = namespaces.map((ns) => {
        const f = figures.get(ns) || { in: 0, out: 0, backlog: 0, storage: 0, producers: 0, consumers: 0, topics: new Set() };
        const samples = record(`ns:${ns}`, f.in, f.out);
        const [tenant, name] = ns.split("/");
        return [el("a", { href: `#/ns/${enc(tenant)}/${enc(name)}` }, ns), count(f.topics.size), count(f.producers),
                count(f.consumers), rate(f.in), rate(f.out), count(f.backlog), bytes(f.storage), chart(samples, 120, 26)];
      });
      fill(root,
        el("h1", {}, "Tenants and namespaces"),
        el("div", { class: "muted" }, `${tenants.length} tenants: ${tenants.join(", ")}`),
        table([["namespace"], ["loaded topics", "num"], ["producers", "num"], ["consumers", "num"], ["msg/s in", "num"],
               ["msg/s out", "num"], ["backlog", "num"], ["storage", "num"], ["rates, last minutes"]], rows));
    }
    return { root, refresh };
  }

  function namespacePage(tenant, namespace) {
    const ns = `${tenant}/${namespace}`;
    const live = el("div", {});
    const name = el("input", { placeholder: "topic name", required: true, id: "create-topic-name" });
    const partitions = el("input", { type: "number", min: 0, value: 0, id: "create-topic-partitions" });
    const create = el("form", { class: "inline", id: "create-topic", onsubmit: (event) => {
      event.preventDefault();
      const topic = name.value.trim();
      if (!topic) return;
      const n = Number(partitions.value);
      const base = `/admin/v2/persistent/${enc(tenant)}/${enc(namespace)}/${enc(topic)}`;
      act(`Create persistent://${ns}/${topic}${n ? ` with ${n} partitions` : ""}?`,
          "PUT", n ? `${base}/partitions` : base, n ? n : undefined, `Created persistent://${ns}/${topic}.`);
    } }, "Create topic ", name, " partitions (0: not partitioned) ", partitions, el("button", { type: "submit" }, "Create"));
    const root = el("div", {}, el("div", { class: "crumbs" }, el("a", { href: "#/tenants" }, "tenants"), ` / ${tenant}`),
                    el("h1", {}, ns), live, el("h2", {}, "New topic"), create);
    async function refresh() {
      const base = `/admin/v2/persistent/${enc(tenant)}/${enc(namespace)}`;
      const [topics, partitioned, metrics] = await Promise.all([getJson(base), getJson(`${base}/partitioned`), getMetrics()]);
      const byTopic = new Map();
      for (const s of metrics) {
        if (s.labels.namespace !== ns || !s.labels.topic || s.labels.subscription !== undefined || s.labels.remote_cluster !== undefined) continue;
        const parent = s.labels.topic.replace(/-partition-\d+$/, "");
        const f = byTopic.get(parent) || { in: 0, out: 0, backlog: 0, storage: 0, producers: 0, consumers: 0, subscriptions: 0 };
        const key = { pulsar_rate_in: "in", pulsar_rate_out: "out", pulsar_msg_backlog: "backlog", pulsar_storage_size: "storage",
                      pulsar_producers_count: "producers", pulsar_consumers_count: "consumers" }[s.name];
        if (key) f[key] += s.value;
        byTopic.set(parent, f);
      }
      const names = [...new Set([...partitioned, ...topics.map((t) => t.replace(/-partition-\d+$/, ""))])].sort();
      const rows = names.map((full) => {
        const f = byTopic.get(full);
        const samples = record(`topic:${full}`, f ? f.in : 0, f ? f.out : 0);
        const [, domain, short] = /^(persistent|non-persistent):\/\/[^/]+\/[^/]+\/(.*)$/.exec(full);
        return [el("a", { href: `#/topic/${domain}/${enc(tenant)}/${enc(namespace)}/${enc(short)}`, "data-topic": full }, short),
                partitioned.includes(full) ? "partitioned" : "", f ? count(f.producers) : "–", f ? count(f.consumers) : "–",
                f ? rate(f.in) : "–", f ? rate(f.out) : "–", f ? count(f.backlog) : "–", f ? bytes(f.storage) : "–",
                chart(samples, 120, 26)];
      });
      fill(live,
        table([["topic"], [""], ["producers", "num"], ["consumers", "num"], ["msg/s in", "num"], ["msg/s out", "num"],
               ["backlog", "num"], ["storage", "num"], ["rates, last minutes"]], rows, "no topics"),
        el("div", { class: "muted" }, "– : not loaded (no client has used it since the broker started)"));
    }
    return { root, refresh };
  }

  function topicPage(domain, tenant, namespace, topic) {
    const full = `${domain}://${tenant}/${namespace}/${topic}`;
    const base = `/admin/v2/${domain}/${enc(tenant)}/${enc(namespace)}/${enc(topic)}`;
    const live = el("div", {});
    const force = el("input", { type: "checkbox", id: "delete-force" });
    const actions = el("div", { class: "actions" },
      el("button", { id: "unload", onclick: () => act(`Unload ${full}? Its producers and consumers reconnect.`, "PUT",
                                                         `${base}/unload`, undefined, `Unloaded ${full}.`) }, "Unload"),
      el("button", { id: "delete-topic", class: "danger", onclick: async () => {
        const partitionsPath = partitions > 0 ? "/partitions" : "";
        await act(`Delete ${full}${force.checked ? ", closing its producers and consumers" : ""}? Its messages are lost.`,
                  "DELETE", `${base}${partitionsPath}?force=${force.checked}`, undefined, `Deleted ${full}.`);
      } }, "Delete topic"),
      el("label", {}, force, " force"));
    const peekSub = el("select", { id: "peek-subscription" });
    const peekCount = el("input", { type: "number", min: 1, max: PEEK_MAX, value: 5, id: "peek-count" });
    const peekOut = el("div", { id: "peek-result" });
    const peek = el("form", { class: "inline", id: "peek", onsubmit: (event) => {
      event.preventDefault();
      peekMessages(base, peekSub.value, Math.min(PEEK_MAX, Number(peekCount.value) || 1), peekOut);
    } }, "Peek the first ", peekCount, " unacknowledged messages of ", peekSub, el("button", { type: "submit" }, "Peek"));
    let partitions = 0;
    let loaded = false;
    const root = el("div", {},
      el("div", { class: "crumbs" }, el("a", { href: "#/tenants" }, "tenants"), " / ",
         el("a", { href: `#/ns/${enc(tenant)}/${enc(namespace)}` }, `${tenant}/${namespace}`)),
      el("h1", {}, full), actions, live, el("h2", {}, "Peek"), peek, peekOut);
    async function refresh() {
      if (!loaded) {
        partitions = (await getJson(`${base}/partitions`)).partitions;
        loaded = true;
      }
      const stats = await getJson(partitions > 0 ? `${base}/partitioned-stats` : `${base}/stats`);
      const samples = record(`topic:${full}`, stats.msgRateIn, stats.msgRateOut);
      const subscriptions = Object.entries(stats.subscriptions || {});
      const backlog = subscriptions.reduce((n, [, s]) => n + s.msgBacklog, 0);
      const chosen = peekSub.value;
      fill(peekSub, ...subscriptions.map(([name]) => el("option", { value: name, selected: name === chosen }, name)));
      const subLink = (name) => el("a", { href: `#/sub/${domain}/${enc(tenant)}/${enc(namespace)}/${enc(topic)}/${enc(name)}`,
                                         "data-subscription": name }, name);
      fill(live,
        el("div", { class: "cards" },
          card("msg/s in", rate(stats.msgRateIn), "rate-in"),
          card("msg/s out", rate(stats.msgRateOut), "rate-out"),
          card("bytes/s in", bytes(stats.msgThroughputIn), "throughput-in"),
          card("bytes/s out", bytes(stats.msgThroughputOut), "throughput-out"),
          card("messages in", count(stats.msgInCounter), "messages-in"),
          card("storage", bytes(stats.storageSize), "storage"),
          card("backlog (entries)", count(backlog), "backlog"),
          card("partitions", partitions || "not partitioned", "partitions")),
        el("h2", {}, "Rates"),
        chartPanel(samples),
        partitions > 0 ? [el("h2", {}, "Partitions"), el("div", { class: "actions" },
          Array.from({ length: partitions }, (_, i) => el("a", {
            href: `#/topic/${domain}/${enc(tenant)}/${enc(namespace)}/${enc(`${topic}-partition-${i}`)}` }, `partition ${i}`)))] : null,
        el("h2", {}, "Producers"),
        table([["name"], ["id", "num"], ["access"], ["address"], ["msg/s in", "num"], ["bytes/s in", "num"], ["connected since"]],
              (stats.publishers || []).map((p) => [p.producerName, p.producerId, p.accessMode, p.address, rate(p.msgRateIn),
                                                   bytes(p.msgThroughputIn), p.connectedSince])),
        el("h2", {}, "Subscriptions"),
        table([["name"], ["type"], ["consumers", "num"], ["backlog", "num"], ["unacked", "num"], ["in replay", "num"],
               ["msg/s out", "num"], ["acks/s", "num"], ["redelivered/s", "num"], ["draining hashes", "num"]],
              subscriptions.map(([name, s]) => [subLink(name), s.type, s.consumers.length, count(s.msgBacklog),
                count(s.unackedMessages), count(s.msgInReplay), rate(s.msgRateOut), rate(s.messageAckRate),
                rate(s.msgRateRedeliver), count(s.drainingHashesCount)])),
        el("h2", {}, "Consumers"),
        table([["subscription"], ["consumer"], ["msg/s out", "num"], ["permits", "num"], ["unacked", "num"],
               ["redelivered/s", "num"], ["blocked on unacked"], ["address"]],
              subscriptions.flatMap(([name, s]) => s.consumers.map((c) => [subLink(name), c.consumerName, rate(c.msgRateOut),
                count(c.availablePermits), count(c.unackedMessages), rate(c.msgRateRedeliver),
                c.blockedConsumerOnUnackedMsgs ? "yes" : "no", c.address]))));
    }
    return { root, refresh };
  }

  async function peekMessages(base, subscription, n, out) {
    if (!subscription) {
      fill(out, el("div", { class: "muted" }, "The topic has no subscription to peek through."));
      return;
    }
    const rows = [];
    let note = null;
    for (let position = 1; position <= n; position += 1) {
      let response;
      try {
        response = await call("GET", `${base}/subscription/${enc(subscription)}/position/${position}`);
      } catch (error) {
        note = error.status === 404 ? `${position - 1} unacknowledged messages` : `Peek refused (${error.status}): ${error.reason}`;
        break;
      }
      const header = (name) => response.headers.get(name) || "";
      const payload = new TextDecoder("utf-8", { fatal: false }).decode(await response.arrayBuffer());
      const batch = header("X-Pulsar-num-batch-message");
      rows.push([el("span", { class: "code" }, header("X-Pulsar-Message-ID")), header("X-Pulsar-partition-key"),
                 header("X-Pulsar-publish-time"), header("X-Pulsar-producer-name"), header("X-Pulsar-PROPERTY"),
                 batch ? `batch of ${batch}` : "",
                 el("pre", { class: "payload" }, payload.length > PAYLOAD_CHARS_MAX ? `${payload.slice(0, PAYLOAD_CHARS_MAX)}…` : payload)]);
    }
    fill(out,
      table([["message id"], ["key"], ["published"], ["producer"], ["properties"], [""], ["payload (UTF-8)"]], rows,
            "no unacknowledged messages"),
      note ? el("div", { class: "muted" }, note) : null);
  }

  function parseRanges(consumer) {
    if (consumer.keyHashRangeArrays) return consumer.keyHashRangeArrays.map(([a, b]) => [a, b]);
    if (consumer.keyHashRanges) return consumer.keyHashRanges.map((text) => text.replace(/[[\]\s]/g, "").split(",").map(Number));
    return [];
  }

  function subscriptionPage(domain, tenant, namespace, topic, subscription) {
    const full = `${domain}://${tenant}/${namespace}/${topic}`;
    const base = `/admin/v2/${domain}/${enc(tenant)}/${enc(namespace)}/${enc(topic)}`;
    const subBase = `${base}/subscription/${enc(subscription)}`;
    const live = el("div", {});
    let orderingMode = null;

    // Why is this key blocked: the explainer's answer, asked again on every refresh while a key is set.
    const keyInput = el("input", { id: "explain-key", placeholder: "key", size: 28 });
    const keyKind = el("select", { id: "explain-kind" }, el("option", { value: "key" }, "key (text)"),
                       el("option", { value: "base64" }, "key (base64)"), el("option", { value: "hash" }, "sticky key hash"));
    const answer = el("div", { id: "explain-answer" });
    let asked = null;
    const explain = el("form", { class: "inline", id: "explain", onsubmit: (event) => {
      event.preventDefault();
      asked = keyInput.value ? { key: keyInput.value, kind: keyKind.value } : null;
      explainKey();
    } }, keyInput, keyKind, el("button", { type: "submit" }, "Why?"));
    async function explainKey() {
      if (!asked) {
        fill(answer);
        return;
      }
      const path = asked.kind === "hash" ? `${subBase}/hashes/${enc(asked.key)}`
        : `${subBase}/keys/${enc(asked.key)}${asked.kind === "base64" ? "?base64Encoded=true" : ""}`;
      try {
        fill(answer, renderExplanation(await getJson(path)));
      } catch (error) {
        fill(answer, el("div", { class: "bad" }, `The explainer refused (${error.status}): ${error.reason}`));
      }
    }

    const skipCount = el("input", { type: "number", min: 1, value: 1, id: "skip-count" });
    const resetMinutes = el("input", { type: "number", min: 0, value: 10, id: "reset-minutes" });
    const actions = el("div", {},
      el("form", { class: "inline", onsubmit: (event) => {
        event.preventDefault();
        const n = Number(skipCount.value);
        act(`Skip the next ${n} unacknowledged messages of ${subscription}? They count as acknowledged.`, "POST",
            `${subBase}/skip/${n}`, undefined, `Skipped ${n} messages of ${subscription}.`);
      } }, el("button", { type: "submit", id: "skip" }, "Skip"), skipCount, "messages"),
      el("form", { class: "inline", onsubmit: (event) => {
        event.preventDefault();
        act(`Clear the whole backlog of ${subscription}? Every message counts as acknowledged.`, "POST",
            `${subBase}/skip_all`, undefined, `Cleared the backlog of ${subscription}.`);
      } }, el("button", { type: "submit", id: "clear-backlog", class: "danger" }, "Clear backlog")),
      el("form", { class: "inline", onsubmit: (event) => {
        event.preventDefault();
        const minutes = Number(resetMinutes.value);
        const timestamp = minutes > 0 ? Date.now() - minutes * 60000 : 0;
        act(`Reset ${subscription} to ${minutes > 0 ? `${minutes} minutes ago` : "the earliest message"}? Its consumers reconnect.`,
            "POST", `${subBase}/resetcursor/${timestamp}`, undefined, `Reset ${subscription}.`);
      } }, el("button", { type: "submit", id: "reset-cursor" }, "Reset cursor"), " to ", resetMinutes,
         " minutes ago (0: the earliest message)"));

    const root = el("div", {},
      el("div", { class: "crumbs" }, el("a", { href: "#/tenants" }, "tenants"), " / ",
         el("a", { href: `#/ns/${enc(tenant)}/${enc(namespace)}` }, `${tenant}/${namespace}`), " / ",
         el("a", { href: `#/topic/${domain}/${enc(tenant)}/${enc(namespace)}/${enc(topic)}` }, topic)),
      el("h1", {}, `Subscription ${subscription}`),
      live,
      el("h2", {}, "Why is this key blocked?"),
      el("div", { class: "panel" }, explain, answer),
      el("h2", {}, "Actions"),
      actions);

    async function refresh() {
      if (orderingMode === null) {
        try {
          orderingMode = (await getJson("/admin/v2/brokers/configuration/runtime")).keySharedOrderingMode;
        } catch (_refused) {
          orderingMode = "";
        }
      }
      const [stats, internal] = await Promise.all([getJson(`${base}/stats`), getJson(`${base}/internalStats`)]);
      const sub = (stats.subscriptions || {})[subscription];
      if (!sub) {
        fill(live, el("div", { class: "bad" }, `Subscription ${subscription} not found for topic ${full}`));
        return;
      }
      const cursor = (internal.cursors || {})[subscription] || {};
      const consumers = sub.consumers.map((c, index) => ({
        name: c.consumerName, color: MagnetarRing.colorOf(index), ranges: parseRanges(c), draining: c.drainingHashes || [], stats: c,
      }));
      const hasRing = consumers.some((c) => c.ranges.length);
      const draining = consumers.flatMap((holder) => holder.draining.map((d) => {
        const owner = MagnetarRing.ownerOf(consumers, d.hash);
        return [d.hash, owner ? owner.name : "nobody", holder.name, count(d.unackMsgs), count(d.blockedAttempts)];
      }));
      const joined = Object.entries(sub.consumersAfterMarkDeletePosition || {});
      const joinedRows = joined.length ? joined.map(([who, position]) => [who, position])
        : consumers.filter((c) => c.stats.readPositionWhenJoining || c.stats.lastSentPositionWhenJoining)
                   .map((c) => [c.name, c.stats.readPositionWhenJoining || c.stats.lastSentPositionWhenJoining]);
      const swatch = (c) => el("span", {}, el("span", { class: "swatch", "data-color": c.color }), c.name);
      const legend = table([["consumer"], ["ranges", "num"], ["share of hashes", "num"], ["permits", "num"],
                            ["unacked", "num"], ["msg/s out", "num"], ["redelivered/s", "num"], ["draining (held)", "num"]],
        consumers.map((c) => [swatch(c), c.ranges.length,
          `${(100 * c.ranges.reduce((n, [a, b]) => n + b + 1 - a, 0) / 65536).toFixed(1)} %`, count(c.stats.availablePermits),
          count(c.stats.unackedMessages), rate(c.stats.msgRateOut), rate(c.stats.msgRateRedeliver), count(c.draining.length)]),
        "no consumer connected");
      for (const node of legend.querySelectorAll(".swatch")) node.style.background = node.dataset.color;
      fill(live,
        el("div", { class: "cards" },
          card("type", sub.type, "type"),
          card("Key_Shared mode", sub.keySharedMode || "–", "key-shared-mode"),
          card("ordering", orderingMode || "–", "ordering-mode"),
          card("backlog (entries)", count(sub.msgBacklog), "backlog"),
          card("unacked", count(sub.unackedMessages), "unacked"),
          card("in replay", count(sub.msgInReplay), "in-replay"),
          card("msg/s out", rate(sub.msgRateOut), "rate-out"),
          card("draining hashes", count(sub.drainingHashesCount), "draining-count"),
          card("mark-delete position", cursor.markDeletePosition || "–", "mark-delete"),
          card("read position", cursor.readPosition || "–", "read-position")),
        hasRing ? [el("h2", {}, "Hash ring"),
          el("div", { class: "row" }, el("div", { id: "ring" }, MagnetarRing.draw(consumers, 380)),
             el("div", {}, legend,
                el("h2", {}, "Draining hashes"),
                table([["hash", "num"], ["owner now"], ["waits for"], ["unacked", "num"], ["blocked attempts", "num"]],
                      draining, "no hash is draining"),
                el("h2", {}, "Recently joined consumers"),
                table([["consumer"], ["join position"]], joinedRows,
                      orderingMode === "pip379" ? "none (pip379: a hash waits only while its old owner holds messages of it)"
                                                : "none")))]
          : [el("h2", {}, "Consumers"), legend]);
      await explainKey();
    }
    return { root, refresh };
  }

  function renderExplanation(a) {
    const who = (c) => (c ? `${c.consumerName} (id ${c.consumerId})` : "nobody");
    const parts = [
      el("div", { class: `verdict ${a.flowing ? "good" : "bad"}`, "data-flowing": String(a.flowing) },
         a.flowing ? "Flowing: nothing holds this key back." : "Blocked."),
      el("div", {}, `key ${a.key !== undefined ? JSON.stringify(a.key) : "–"}, sticky key hash `,
         el("span", { class: "code", "data-field": "sticky-hash" }, a.stickyKeyHash),
         `, owner now: `, el("span", { "data-field": "owner" }, who(a.consumer))),
      a.reasons && a.reasons.length
        ? el("ul", { class: "reasons" }, a.reasons.map((r) => el("li", { "data-code": r.code }, el("b", {}, r.code), ": ", r.description)))
        : null,
    ];
    if (a.drainingFrom) {
      const d = a.drainingFrom;
      parts.push(el("div", { "data-field": "draining-from" },
        `Draining from ${d.consumerName} (id ${d.consumerId}): ${d.unackMsgs} unacked, ${d.blockedAttempts} blocked attempts, ` +
        `held by ${(d.heldBy || []).join(", ")} since ${d.heldSince || "–"}`));
    }
    if (a.pendingMessages && a.pendingMessages.length) {
      parts.push(table([["message"], ["consumer"], ["unacked", "num"], ["same key"], ["redeliveries", "num"], ["sent"]],
        a.pendingMessages.map((m) => [el("span", { class: "code" }, m.messageId), m.consumerName, m.unackedMessages,
                                      m.sameKey === undefined ? "" : m.sameKey ? "yes" : "no", m.redeliveryCount, m.sentTime])));
    }
    parts.push(el("div", { class: "muted" },
      `replay queue: ${(a.replayQueue || []).length}, delayed: ${(a.delayedMessages || []).length}, mark-delete position ${a.markDeletePosition || "–"}`));
    return el("div", {}, parts);
  }

  // ---------------------------------------------------------------------------------------- router

  const routes = [
    [/^#?\/?$/, overviewPage, "overview"],
    [/^#\/tenants$/, tenantsPage, "tenants"],
    [/^#\/ns\/([^/]+)\/([^/]+)$/, namespacePage, "tenants"],
    [/^#\/topic\/(persistent|non-persistent)\/([^/]+)\/([^/]+)\/([^/]+)$/, topicPage, "tenants"],
    [/^#\/sub\/(persistent|non-persistent)\/([^/]+)\/([^/]+)\/([^/]+)\/([^/]+)$/, subscriptionPage, "tenants"],
  ];

  let current = null;
  let refreshes = 0;

  // One refresh loop per page: the next read starts POLL_MS after the previous one ended, so a slow
  // broker is never asked faster than it answers; a hidden tab reads nothing.
  function start(view) {
    let timer = null;
    let stopped = false;
    let running = false;
    let again = false;
    const tick = async () => {
      if (stopped) return;
      if (running) {
        again = true;
        return;
      }
      clearTimeout(timer);
      running = true;
      if (!document.hidden) {
        try {
          await view.refresh();
          refreshes += 1;
          document.body.dataset.refreshes = String(refreshes);
          liveBadge.className = "";
          liveBadge.textContent = `live · ${new Date().toLocaleTimeString()}`;
          if (banner.className !== "ok") flash("");
        } catch (error) {
          liveBadge.className = "stale";
          liveBadge.textContent = "not updating";
          flash(error instanceof HttpError ? `${error.status}: ${error.reason}` : `The broker did not answer: ${error}`);
        }
      }
      running = false;
      if (stopped) return;
      if (again) {
        again = false;
        tick();
      } else {
        timer = setTimeout(tick, POLL_MS);
      }
    };
    tick();
    return { stop: () => { stopped = true; clearTimeout(timer); }, poke: tick };
  }

  function route() {
    if (current) current.stop();
    const hash = location.hash || "#/";
    for (const [pattern, make, nav] of routes) {
      const match = pattern.exec(hash);
      if (!match) continue;
      const view = make(...match.slice(1).map(decodeURIComponent));
      for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.nav === nav);
      fill(main, view.root);
      current = start(view);
      return;
    }
    fill(main, el("h1", {}, "Not found"), el("a", { href: "#/" }, "Overview"));
    current = null;
  }

  window.addEventListener("hashchange", () => {
    flash("");
    route();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && current) current.poke();
  });
  if (sessionStorage.getItem(AUTH_KEY)) signout.hidden = false;
  route();
})();
