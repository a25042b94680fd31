// Yak console: the Reassignments page (issue 23, KIP-455 moves in progress). A module of
// its own so app.js stays the router and the shared helpers; app.js hands those in (`h`).
//
// #/reassignments   every partition being moved: replicas, adding and removing sets, leader,
//                   ISR, per adding replica its size, bytes left and copy rate (from
//                   DescribeLogDirs sampled by the gateway), and the throttles in force

export function reassignViews(h) {
  const { api, esc, every, guarded, enhance, clearError, view, generation, fmtBytes } = h;

  const fmtRate = (r) => (r === null || r === undefined ? "–" : `${fmtBytes(Math.round(r))}/s`);
  const ids = (xs) => (xs.length ? xs.join(", ") : "–");
  // Bytes left at the current rate: a guess, since the leader keeps appending.
  const fmtLeft = (m) => {
    if (m.bytes_left === null || !m.rate) return "–";
    const s = Math.round(m.bytes_left / m.rate);
    return s < 120 ? `~${s} s` : s < 7200 ? `~${Math.round(s / 60)} min` : `~${Math.round(s / 3600)} h`;
  };

  function replicaCell(m) {
    if (!m.adding_replicas.length) return '<span class="muted">nothing to copy (removing only)</span>';
    return m.adding_replicas.map((r) => `<div data-adding="${r.broker}">broker ${r.broker}${
      r.online ? "" : ' <span class="err">offline</span>'}: ${
      r.in_sync ? '<span class="ok">in sync</span>'
        : `${esc(fmtBytes(r.size))} of ${esc(fmtBytes(m.leader_size))}`}</div>`).join("");
  }

  function throttleCell(t) {
    const parts = [["leader", t["leader.replication.throttled.replicas"]],
      ["follower", t["follower.replication.throttled.replicas"]]].filter(([, v]) => v);
    return parts.length ? parts.map(([side, v]) => `${side}: <code>${esc(v)}</code>`).join("<br>")
      : '<span class="muted">none</span>';
  }

  async function reassignments() {
    const g = generation();
    view.innerHTML = `<h1>Reassignments</h1>
      <p class="muted">Partitions being moved (AlterPartitionReassignments, <code>yak partitions
        reassign</code>): adding replicas copy from the leader, join the ISR, and then the
        removing replicas leave. Bytes left compare each adding replica's size with the leader's;
        the rate is its growth since the previous look.</p>
      <div id="reassignments"><p class="muted">Loading…</p></div>
      <h2>Replication throttles <span class="legend">(bytes/s, KIP-73)</span></h2>
      <div id="reassign-throttles"></div>`;
    const load = async () => {
      const d = await api("/reassignments");
      if (g !== generation()) return;
      const box = document.getElementById("reassignments");
      box.innerHTML = d.reassignments.length
        ? `<table id="reassignments-table"><thead><tr><th>Topic</th><th class="num">Partition</th>
          <th>Replicas</th><th>Target</th><th>Adding</th><th>Removing</th><th>Leader</th><th>ISR</th>
          <th>Copy</th><th class="num">Bytes left</th><th class="num">Rate</th><th class="num">Time left</th><th>Throttled replicas</th></tr></thead>
          <tbody>${d.reassignments.map((m) => `<tr data-move="${esc(`${m.topic}-${m.partition}`)}">
          <td><a href="#/topic/${encodeURIComponent(m.topic)}">${esc(m.topic)}</a></td>
          <td class="num">${m.partition}</td><td>${ids(m.replicas)}</td><td>${ids(m.target)}</td>
          <td class="adding">${ids(m.adding)}</td><td class="removing">${ids(m.removing)}</td>
          <td>${m.leader < 0 ? '<span class="err">none</span>' : m.leader}</td><td>${ids(m.isr)}</td>
          <td>${replicaCell(m)}</td>
          <td class="num bytes-left">${esc(fmtBytes(m.bytes_left))}</td>
          <td class="num rate">${esc(fmtRate(m.rate))}</td><td class="num eta">${esc(fmtLeft(m))}</td>
          <td>${throttleCell(m.throttled_replicas)}</td></tr>`).join("")}</tbody></table>`
        : `<p class="muted" id="reassignments-empty">No partition is being moved.</p>`;
      enhance("reassignments");
      const rateCell = (b, v) => (!b.known ? '<span class="muted">not known</span>'
        : v === null ? '<span class="muted">unthrottled</span>' : esc(fmtRate(v)));
      const t = document.getElementById("reassign-throttles");
      t.innerHTML = `<table id="throttles-table"><thead><tr><th>Broker</th>
        <th class="num">Leader rate</th><th class="num">Follower rate</th></tr></thead>
        <tbody>${d.brokers.map((b) => `<tr data-throttle-broker="${b.id}"><td><a href="#/broker/${b.id}">${b.id}</a></td>
        <td class="num leader-rate">${rateCell(b, b.leader_rate)}</td>
        <td class="num follower-rate">${rateCell(b, b.follower_rate)}</td>
        </tr>`).join("")}</tbody></table>${Object.entries(d.errors).map(([k, v]) =>
        `<p class="muted">The ${esc(k)} are not known: ${esc(v)}</p>`).join("")}`;
      clearError();
    };
    await guarded(load);
    every(3000, () => guarded(load));
  }

  return { reassignments };
}
