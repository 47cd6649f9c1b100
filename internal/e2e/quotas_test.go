package e2e

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestQuotas: one visitor cannot take the cluster for themselves. Past the
// per-user instance quota a visitor gets 429 saying so (and closing an
// instance frees its place); a client that drops its cookies to get a
// fresh identity every time is stopped by the per-address instance quota,
// then by the per-address limit on new identities; the (N+1)-th window on
// one browser is told why it is refused. Every client is on loopback, so
// all share one address. Quotas are small here to keep the test light.
func TestQuotas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, extra: []string{"--apps", apps,
		"--quota-instances-per-user", "2", "--quota-instances-per-ip", "4", "--quota-sockets-per-browser", "2",
		"--quota-new-identities-burst", "10", "--quota-new-identities-per-minute", "0"}})
	base := "http://" + c.public

	alice := newUser(t, base)
	var aliceInstances []string
	newInstance := func() hop {
		t.Helper()
		return alice.post("/multi", alice.get("/multi").body, "new-instance")
	}
	t.Run("per user: 429 past the limit, closing frees it", func(t *testing.T) {
		for range 2 {
			h := newInstance()
			if h.status != http.StatusSeeOther || !strings.HasPrefix(h.location, "/multi/a/") {
				t.Fatalf("new instance: %+v", h)
			}
			aliceInstances = append(aliceInstances, h.location)
		}
		land := alice.get("/multi")
		refused := alice.postBody("/multi", land.body, "new-instance")
		if refused.status != http.StatusTooManyRequests || !strings.Contains(refused.body, "You already have 2 app instances open") ||
			!strings.Contains(refused.body, "Close some of your instances") || !strings.Contains(refused.body, `href="/multi"`) {
			t.Fatalf("third instance: %d %s", refused.status, refused.body)
		}
		// An API client gets the same answer as JSON.
		req, _ := http.NewRequest(http.MethodPost, base+"/multi", strings.NewReader("action=new-instance&csrf="+csrfField.FindStringSubmatch(land.body)[1]))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		resp, err := alice.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get("Content-Type"), "json") ||
			!strings.Contains(string(b), "You already have 2 app instances open") {
			t.Fatalf("third instance as JSON: %s %s %s", resp.Status, resp.Header.Get("Content-Type"), b)
		}
		// Closing one frees its place.
		first := aliceInstances[0]
		if h := alice.post(first, alice.get(first).body, "close-instance"); h.status != http.StatusSeeOther {
			t.Fatalf("close: %+v", h)
		}
		h := newInstance()
		if h.status != http.StatusSeeOther || !strings.HasPrefix(h.location, "/multi/a/") {
			t.Fatalf("new instance after closing one: %+v", h)
		}
		aliceInstances = append(aliceInstances[1:], h.location)
	})

	t.Run("cookie droppers: per-address instance limit", func(t *testing.T) {
		// alice holds 2 of the address's 4; two fresh identities get one each.
		for i := range 3 {
			fresh := newUser(t, base)
			h := fresh.get("/typing")
			if i < 2 {
				if h.status != http.StatusFound || browserURL.FindStringSubmatch(h.location) == nil {
					t.Fatalf("fresh visitor %d: %+v", i, h)
				}
				continue
			}
			if h.status != http.StatusTooManyRequests || !strings.Contains(h.body, "Your network address already has 4 app instances open") {
				t.Fatalf("fresh visitor past the address's limit: %d %s", h.status, h.body)
			}
		}
		n := 0
		for _, in := range c.mustStatus().Instances {
			if in.App == "typing" || in.App == "multi" {
				n++
			}
		}
		if n != 4 {
			t.Fatalf("%d instances in the cluster, want 4", n)
		}
	})

	t.Run("sockets per browser", func(t *testing.T) {
		inst := aliceInstances[0]
		h := alice.post(inst, alice.get(inst).body, "new-browser")
		if h.status != http.StatusSeeOther || browserURL.FindStringSubmatch(h.location) == nil {
			t.Fatalf("new browser: %+v", h)
		}
		wsURL := "ws://" + c.public + h.location + "/ws"
		for i := range 2 {
			m, err := readText(t, dialSocket(t, alice, wsURL))
			if err != nil || m["t"] != "hello" {
				t.Fatalf("socket %d: %v %v", i, m, err)
			}
		}
		m, err := readText(t, dialSocket(t, alice, wsURL))
		if err != nil || m["t"] != "closed" || !strings.Contains(m["reason"].(string), "already has 2 windows connected") {
			t.Fatalf("third socket: %v %v", m, err)
		}
		st := c.mustStatus()
		var addr string
		for _, w := range st.Workers {
			if strings.Contains(h.location, "/a/"+w.ID+".") {
				addr = w.HTTPAddr
			}
		}
		fams := scrape(t, "http://"+addr+"/metrics", c.metricsToken())
		if v := value(fams, "cloudbrowser_quota_refusals_total", map[string]string{"limit": wire.QuotaSocketsPerBrowser}); v != 1 {
			t.Fatalf("socket refusals counted on the worker: %v", v)
		}
	})

	t.Run("cookie droppers: new identities per address", func(t *testing.T) {
		// 10 identities at most, never refilled: 3 taken above, and alice's.
		var refused hop
		for i := range 20 {
			h := newUser(t, base).get("/multi")
			if h.status == http.StatusTooManyRequests {
				refused = h
				if i > 10 {
					t.Fatalf("refused only after %d more identities", i)
				}
				break
			}
			if h.status != http.StatusOK {
				t.Fatalf("fresh visitor %d: %+v", i, h)
			}
		}
		if !strings.Contains(refused.body, "Too many new visitors") || !strings.Contains(refused.body, "Keep cookies enabled") {
			t.Fatalf("no refusal of new identities: %+v", refused)
		}
		// A visitor who keeps their cookie is not affected.
		if h := alice.get("/multi"); h.status != http.StatusOK {
			t.Fatalf("alice after the identity limit: %+v", h)
		}
		fams := scrape(t, "http://"+c.admin+"/metrics", c.token)
		for limit, want := range map[string]float64{
			wire.QuotaInstancesPerUser: 2, wire.QuotaInstancesPerIP: 1, wire.QuotaNewIdentities: 1,
		} {
			if v := value(fams, "cloudbrowser_quota_refusals_total", map[string]string{"limit": limit}); v != want {
				t.Errorf("master refusals{limit=%q} = %v, want %v", limit, v, want)
			}
		}
	})
}

// postBody is post, keeping the answer's body.
func (u *user) postBody(path, page, action string) hop {
	u.t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		u.t.Fatalf("no CSRF token in page:\n%s", page)
	}
	resp, err := u.c.Post(u.base+path, "application/x-www-form-urlencoded", strings.NewReader("action="+action+"&csrf="+m[1]))
	if err != nil {
		u.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return hop{path: path, status: resp.StatusCode, location: resp.Header.Get("Location"), body: string(b)}
}
