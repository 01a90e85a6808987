/** The control room's stylesheet: a dark, calm page that reads well on a wall screen. */
export const DASHBOARD_CSS = `
:root{--bg:#0d1117;--panel:#151b23;--panel2:#1b232d;--line:#2a3441;--text:#e6edf3;--muted:#8b98a8;
--green:#3fb950;--blue:#58a6ff;--amber:#d29922;--red:#f85149;--violet:#bc8cff;--teal:#39c5cf;--grey:#6e7681}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--text);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
a{color:var(--blue);text-decoration:none}a:hover{text-decoration:underline}
header{display:flex;align-items:center;gap:16px;padding:18px 28px;border-bottom:1px solid var(--line);background:linear-gradient(180deg,#111820,#0d1117)}
header h1{font-size:20px;margin:0;font-weight:650;letter-spacing:.2px}
header h1 span{color:var(--muted);font-weight:400}
.spacer{flex:1}
.badge{display:inline-flex;align-items:center;gap:6px;padding:3px 10px;border-radius:999px;font-size:12px;font-weight:600;border:1px solid var(--line);background:var(--panel)}
.dot{width:8px;height:8px;border-radius:50%;background:var(--grey);display:inline-block}
.live-on .dot{background:var(--green);box-shadow:0 0 0 3px rgba(63,185,80,.18)}
.live-poll .dot{background:var(--amber)}
main{padding:22px 28px 40px;max-width:1500px;margin:0 auto}
h2{font-size:13px;text-transform:uppercase;letter-spacing:.9px;color:var(--muted);margin:26px 0 12px;font-weight:650}
h2 .count{color:var(--text);background:var(--panel2);border-radius:999px;padding:1px 8px;margin-left:6px;font-size:12px}
.hosts{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:14px}
.host{background:var(--panel);border:1px solid var(--line);border-radius:12px;padding:16px 18px;border-top:4px solid var(--grey)}
.host h3{margin:0;font-size:18px;display:flex;align-items:center;gap:10px}
.host .meta{color:var(--muted);font-size:12px;margin-top:2px}
.host dl{display:grid;grid-template-columns:auto 1fr;gap:5px 12px;margin:12px 0 0}
.host dt{color:var(--muted)}.host dd{margin:0}
.host .note{margin-top:10px;font-size:12.5px;color:var(--amber);background:rgba(210,153,34,.08);border-radius:8px;padding:6px 9px}
.pill{display:inline-block;padding:2px 9px;border-radius:999px;font-size:12px;font-weight:650;background:var(--panel2);color:var(--muted);border:1px solid var(--line)}
.s-idle{color:var(--green);border-color:rgba(63,185,80,.4)} .host.b-idle{border-top-color:var(--green)}
.s-service{color:var(--teal);border-color:rgba(57,197,207,.4)} .host.b-service{border-top-color:var(--teal)}
.s-allocated{color:var(--blue);border-color:rgba(88,166,255,.4)} .host.b-allocated{border-top-color:var(--blue)}
.s-held,.s-draining{color:var(--violet);border-color:rgba(188,140,255,.4)} .host.b-held,.host.b-draining{border-top-color:var(--violet)}
.s-cleaning,.s-restoring{color:var(--amber);border-color:rgba(210,153,34,.4)} .host.b-cleaning,.host.b-restoring{border-top-color:var(--amber)}
.s-release-required,.s-quarantined,.s-offline{color:var(--red);border-color:rgba(248,81,73,.4)} .host.b-release-required,.host.b-quarantined,.host.b-offline{border-top-color:var(--red)}
.s-unknown{color:var(--grey)}
.host dd{color:var(--text)}
.h-serving{color:var(--green)}.h-starting,.h-draining{color:var(--amber)}.h-failed{color:var(--red)}.h-stopped,.h-unknown,.h-none{color:var(--muted)}
table{width:100%;border-collapse:separate;border-spacing:0;background:var(--panel);border:1px solid var(--line);border-radius:12px;overflow:hidden}
th{text-align:left;font-size:12px;color:var(--muted);font-weight:600;padding:9px 12px;background:var(--panel2);border-bottom:1px solid var(--line)}
td{padding:9px 12px;border-bottom:1px solid var(--line);vertical-align:top}
tr:last-child td{border-bottom:0}
td.pos{font-weight:700;font-size:16px;width:44px;text-align:center;color:var(--blue)}
.kind{font-weight:600}.prio{color:var(--muted);font-size:12px;margin-left:4px}
.why{color:var(--muted)} .mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
.empty{color:var(--muted);padding:14px 16px;background:var(--panel);border:1px dashed var(--line);border-radius:12px}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:18px}
@media (max-width:1100px){.cols{grid-template-columns:1fr}}
.ev td{font-size:13px}.ev .t{color:var(--muted);white-space:nowrap}
.arrow{color:var(--muted)}
td.starts{white-space:nowrap}.eta{color:var(--blue);font-weight:600}.eta-blocked{color:var(--amber)}
.target{color:var(--violet);font-weight:600}.lease time{font-weight:600}
.blocker{margin:0 0 12px;padding:12px 16px;border-radius:12px;border:1px solid rgba(210,153,34,.45);background:rgba(210,153,34,.08);color:var(--text);line-height:1.55}
.blocker strong{color:var(--amber)}
footer{color:var(--muted);font-size:12px;padding:0 28px 24px;max-width:1500px;margin:0 auto}
`;
