package proxy

import (
	"bytes"
	"context"
	"html/template"
	"net/http"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
)

var homeTmpl = template.Must(template.New("home").Parse(homeSrc))

const homeSrc = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>CloudBrowser</title>
<style>body{font-family:system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222}li{margin:.5em 0}</style>
</head><body>
<h1>CloudBrowser</h1>
{{if .}}<ul>
{{range .}}<li><a href="/{{.MountPoint}}">{{.Name}}</a>{{if .Description}} — {{.Description}}{{end}}</li>
{{end}}</ul>{{else}}<p>No applications are published yet.</p>{{end}}
</body></html>
`

func init() { httpsec.AllowInline(homeSrc) }

// page writes the cluster's error page with the proxy's security headers.
func (p *Proxy) page(w http.ResponseWriter, r *http.Request, id string, status int, title, msg string) {
	p.write(w, r, id, pages.Page{Status: status, Title: title, Message: msg})
}

func (p *Proxy) write(w http.ResponseWriter, r *http.Request, id string, pg pages.Page) {
	httpsec.SetPage(w.Header(), p.scheme().HTTPS(r))
	pages.Write(w, r, id, pg)
}

func (p *Proxy) serveHome(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		p.st.badRequests.Add(1)
		w.Header().Set("Allow", "GET, HEAD")
		p.page(w, r, id, http.StatusMethodNotAllowed, "Method not allowed", "The home page only supports GET.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.RouteTimeout)
	apps, err := p.cfg.Router.Apps(ctx)
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		p.st.routeErrors.Add(1)
		p.log.Warn().Str("request_id", id).Err(err).Msg("listing apps failed")
		p.write(w, r, id, pages.MasterUnavailable)
		return
	}
	links := make([]AppLink, 0, len(apps))
	for _, a := range apps {
		a.MountPoint = strings.TrimPrefix(a.MountPoint, "/")
		if a.Name == "" {
			a.Name = a.MountPoint
		}
		links = append(links, a)
	}
	var buf bytes.Buffer
	if err := homeTmpl.Execute(&buf, links); err != nil {
		p.log.Error().Str("request_id", id).Err(err).Msg("home page template")
		p.page(w, r, id, http.StatusInternalServerError, "Internal error", "The home page could not be rendered.")
		return
	}
	httpsec.SetPage(w.Header(), p.scheme().HTTPS(r))
	pages.WriteHTML(w, r, buf.Bytes(), "no-cache")
}
