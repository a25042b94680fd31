// Yak console: the Share groups pages (KIP-932 queues). A module of its own so app.js
// stays the router and the shared helpers; app.js hands those in (`h`).
//
// #/share-groups       every share group and its state
// #/share-group/NAME   members, per partition start offset, log end, lag, in flight and
//                      acquired, a histogram of in-flight records by delivery count, the
//                      dead-letter topic (in-flight parts only inside `yak serve`)

export function shareViews(h) {
  const { api, esc, every, guarded, enhance, clearError, view, generation } = h;

  async function shareGroups() {
    const g = generation();
    view.innerHTML = `<h1>Share groups</h1><div id="share-groups"><p class="muted">Loading…</p></div>`;
    const load = async () => {
      const rows = await api("/share-groups");
      if (g !== generation()) return;
      document.getElementById("share-groups").innerHTML = rows.length
        ? `<table id="share-groups-table"><thead><tr><th>Share group</th><th>State</th></tr></thead>
          <tbody>${rows.map((r) => `<tr data-share-group="${esc(r.group_id)}">
          <td><a href="#/share-group/${encodeURIComponent(r.group_id)}">${esc(r.group_id)}</a></td>
          <td>${esc(r.state)}</td></tr>`).join("")}</tbody></table>`
        : `<p class="muted">No share groups.</p>`;
      enhance("share-groups");
      clearError();
    };
    await guarded(load);
    every(3000, () => guarded(load));
  }

  function histogram(rows) {
    if (!rows.length) return `<p class="muted">Nothing in flight.</p>`;
    const top = Math.max(...rows.map((r) => r.records), 1);
    return `<table id="delivery-histogram"><thead><tr><th class="num">Delivery count</th>
      <th class="num">Records</th><th></th></tr></thead><tbody>${rows.map((r) =>
      `<tr data-delivery-count="${r.delivery_count}"><td class="num">${r.delivery_count}</td>
      <td class="num">${r.records}</td><td><div class="bar" style="width:${
        Math.max(2, Math.round(240 * r.records / top))}px"></div></td></tr>`).join("")}</tbody></table>`;
  }

  async function shareGroupPage(id) {
    const g = generation();
    view.innerHTML = `<h1>Share group ${esc(id)}</h1><div id="share-summary" class="cards"></div>
      <h2>Partitions</h2><div id="share-partitions"></div>
      <h2>In flight by delivery count <span class="legend" id="in-flight-source"></span></h2>
      <div id="share-histogram"></div><h2>Members</h2><div id="share-members"></div>
      <p><a href="#/share-groups">All share groups</a></p>`;
    const load = async () => {
      const d = await api(`/share-groups/${encodeURIComponent(id)}`);
      if (g !== generation()) return;
      const inFlight = d.partitions.reduce((a, p) => a + (p.in_flight ?? 0), 0);
      document.getElementById("share-summary").innerHTML = [["State", d.state],
        ["Members", d.members.length], ["Total lag", d.total_lag],
        ["In flight", d.in_flight ? inFlight : "–"],
        ["Dead-letter topic", d.dead_letter_topic || "none"]].map(([l, v]) =>
        `<div class="card" data-card="${esc(l)}"><div class="label">${esc(l)}</div>
        <div class="value">${esc(v)}</div></div>`).join("");
      const n = (v) => (v === null || v === undefined ? "–" : v);
      document.getElementById("share-partitions").innerHTML = d.partitions.length
        ? `<table id="share-partitions-table"><thead><tr><th>Topic</th><th class="num">Partition</th>
          <th class="num">Start offset</th><th class="num">Log end</th><th class="num">Lag</th>
          <th class="num">In flight</th><th class="num">Acquired</th></tr></thead>
          <tbody>${d.partitions.map((p) => `<tr data-tp="${esc(p.topic)}-${p.partition}">
          <td>${esc(p.topic)}</td><td class="num">${p.partition}</td>
          <td class="num start">${n(p.start_offset)}</td><td class="num">${n(p.log_end_offset)}</td>
          <td class="num lag">${p.error ? esc(p.error) : n(p.lag)}</td>
          <td class="num in-flight">${n(p.in_flight)}</td><td class="num acquired">${n(p.acquired)}</td>
          </tr>`).join("")}</tbody></table>`
        : `<p class="muted">No share partitions yet.</p>`;
      document.getElementById("in-flight-source").textContent = d.in_flight
        ? `(${d.in_flight.source})` : "";
      document.getElementById("share-histogram").innerHTML = d.in_flight
        ? histogram(d.in_flight.by_delivery_count)
        : `<p class="muted">Not available: in-flight state is read from the broker the console
           runs in (yak serve --http); no Kafka API describes it.</p>`;
      document.getElementById("share-members").innerHTML = d.members.length
        ? `<table id="share-members-table"><thead><tr><th>Member</th><th class="num">Epoch</th>
          <th>Client</th><th>Host</th><th>Assignment</th></tr></thead><tbody>${d.members.map((m) =>
          `<tr><td>${esc(m.member_id)}</td><td class="num">${m.member_epoch}</td>
          <td class="client">${esc(m.client_id)}</td><td>${esc(m.host)}</td>
          <td>${m.assignment.map(esc).join(", ")}</td></tr>`).join("")}</tbody></table>`
        : `<p class="muted">No members.</p>`;
      clearError();
    };
    await guarded(load);
    every(3000, () => guarded(load));
  }

  return { shareGroups, shareGroupPage };
}
