package debugpage

// pageHTML is the page's template (html/template): a table a watched
// Transport, then the events. It refreshes itself by a meta refresh, so
// that it needs no script (the page's Content-Security-Policy allows
// none).
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<title>retryfuse · live page</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2125; background: #fff; }
h1 { font-size: 1.4em; margin: 0 0 .2em; }
h2 { font-size: 1.15em; margin: 1.4em 0 .3em; }
.meta, .summary { color: #5c6670; margin: 0 0 .6em; }
.summary b { color: #1d2125; }
table { border-collapse: collapse; width: 100%; margin-bottom: .5em; }
th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid #e3e6e8; vertical-align: top; }
th { background: #f4f6f8; font-weight: 600; white-space: nowrap; }
td.scope { font-family: ui-monospace, monospace; word-break: break-all; }
tr.row-bad td { background: #fff6f5; }
tr.row-bad td.scope { border-left: 4px solid #c62828; }
tr.row-warn td.scope { border-left: 4px solid #e6a100; }
td.call { font-family: ui-monospace, monospace; white-space: nowrap; }
span.c { display: inline-block; padding: .05em .5em; border-radius: .8em; white-space: nowrap; }
.ok { background: #e3f4e6; color: #1b5e20; }
.warn { background: #fff3cd; color: #7a5200; }
.bad { background: #fde2e1; color: #a11a1a; font-weight: 600; }
.off { background: #eef0f2; color: #737d87; }
td.err { font-family: ui-monospace, monospace; font-size: .9em; color: #5c6670; overflow-wrap: anywhere; }
.none { color: #737d87; font-style: italic; }
a { color: #0b57d0; }
</style>
</head>
<body>
<h1>retryfuse</h1>
<p class="meta">Read at {{.At}}{{if .Refresh}} · refreshes every {{.Refresh}}s{{end}} · <a href="{{.JSON}}">JSON</a>{{if .Filter}} · scopes holding “{{.Filter}}”{{end}}</p>
{{range .Transports}}
<h2>{{.Name}}</h2>
{{if .EventsOnly}}{{else}}<p class="summary"><b>{{.Scopes}}</b> scopes{{if .Open}} · <span class="c bad">{{.Open}} open</span>{{end}}{{if .HalfOpen}} · <span class="c warn">{{.HalfOpen}} half-open</span>{{end}}{{if .Refusing}} · <span class="c bad">{{.Refusing}} throttled</span>{{end}}{{if .Queued}} · <span class="c warn">{{.Queued}} queueing</span>{{end}} · give-ups: {{.GiveUps}} · reconcile errors: {{.Reconciles}}</p>
{{if .Rows}}<table>
<thead><tr><th>Scope</th><th>Breaker</th><th>Retry budget</th><th>In flight / limit</th><th>Rate limit</th><th>Throttle</th><th>Pace</th></tr></thead>
<tbody>
{{range .Rows}}<tr class="row-{{.Class}}" data-scope="{{.Scope}}" data-breaker="{{.Breaker}}"><td class="scope">{{.Scope}}</td>{{range .Cells}}<td><span class="c {{.Class}}" title="{{.Title}}">{{.Text}}</span></td>{{end}}</tr>
{{end}}</tbody>
</table>
{{if .Hidden}}<p class="meta">{{.Hidden}} more scopes, less troubled: the JSON has them all{{if not .HasFilter}}, and ?scope=TEXT keeps those whose name holds TEXT{{end}}.</p>{{end}}
{{else if .HasFilter}}<p class="none">No scope's name holds the text asked for.</p>{{else}}<p class="none">No scope yet: the Transport keeps a scope's state from its first call.</p>{{end}}{{end}}
{{end}}
<h2>Last give-ups and reconcile errors</h2>
{{if .Events}}<table id="events">
<thead><tr><th>Time (UTC)</th><th>Transport</th><th>Reason</th><th>Call</th><th>Status</th><th>Attempts</th><th>Error</th></tr></thead>
<tbody>
{{range .Events}}<tr data-kind="{{.Kind}}"><td>{{.At}}</td><td>{{.Transport}}</td><td><span class="c {{.Class}}">{{.Reason}}</span></td><td class="call">{{.Call}}</td><td>{{.Status}}</td><td>{{.Attempts}}</td><td class="err">{{.Error}}</td></tr>
{{end}}</tbody>
</table>
{{else}}<p class="none">None yet{{if not .Transports}}: no Transport is watched (debugpage.Page.Watch){{end}}.</p>{{end}}
</body>
</html>
`
