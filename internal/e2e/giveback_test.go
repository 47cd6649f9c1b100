package e2e

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestPoolDemoBrowsersGivenBack: 20 sequential distinct
// visitors of pooldemo (maxSize 4, idleTimeout 2s) all get a browser, each
// connecting its client engine and leaving. Idle browsers go back to the
// pool through its back sequence (statistics and metrics say so), and a
// visitor who comes back is told their browser was released and gets a
// working one; their old client engine socket is told too.
func TestPoolDemoBrowsersGivenBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps := sampleWith(t, "pooldemo", map[string]any{"idleTimeout": "2s"})
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public

	type visitor struct {
		u   *user
		loc string // Browser URL
	}
	var visitors []visitor
	busy := 0 // answers "No browser available" before the visitor got one
	for i := range 20 {
		u := newUser(t, base)
		var last hop
		deadline := time.Now().Add(90 * time.Second)
		for {
			hops := u.open("/pooldemo")
			last = hops[len(hops)-1]
			if last.status == 200 {
				break
			}
			if last.status != http.StatusServiceUnavailable || !strings.Contains(last.body, "maximum number of browsers in the specific pool") || time.Now().After(deadline) {
				t.Fatalf("visitor %d: %d %s", i, last.status, last.body)
			}
			busy++
			time.Sleep(250 * time.Millisecond) // as a user retrying would
		}
		if browserURL.FindStringSubmatch(last.path) == nil {
			t.Fatalf("visitor %d ended at %s", i, last.path)
		}
		conn, st := dialStatus(t, u, "ws://"+c.public+last.path+"/ws")
		if st != http.StatusSwitchingProtocols {
			t.Fatalf("visitor %d socket: %d", i, st)
		}
		if m, err := readText(t, conn); err != nil || m["t"] != "hello" {
			t.Fatalf("visitor %d hello: %v %v", i, m, err)
		}
		conn.Close()
		visitors = append(visitors, visitor{u, last.path})
	}
	t.Logf("20 visitors served; %d answers of a full pool while released browsers came back", busy)

	// Every browser comes back: none leased, 20 returns, 20 back
	// sequences run, 20 idle releases.
	st := c.mustStatus()
	metricsURL := "http://" + st.Workers[0].HTTPAddr + "/metrics"
	pool := map[string]string{"pool": "pooldemo"}
	deadline := time.Now().Add(60 * time.Second)
	for {
		fams := scrape(t, metricsURL, c.metricsToken())
		leased := value(fams, "cloudbrowser_pool_leased_browsers", pool)
		returns := value(fams, "cloudbrowser_pool_returns_total", pool)
		backs := value(fams, "cloudbrowser_pool_backs_total", pool)
		leases := value(fams, "cloudbrowser_pool_leases_total", pool)
		released := value(fams, "cloudbrowser_browsers_released_idle_total", nil)
		if leased == 0 && returns >= 20 && backs >= 20 && released >= 20 {
			t.Logf("pool: leases %v, returns %v, backs %v, idle releases %v", leases, returns, backs, released)
			if leases != 20 {
				t.Errorf("%v leases for 20 visitors", leases)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("browsers not back: leased %v, returns %v, backs %v, released %v", leased, returns, backs, released)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.waitFor("pool statistics in the load report", 10*time.Second, func(st *wire.ClusterStatus) bool {
		p := strings.ReplaceAll(string(st.Workers[0].Pools), " ", "")
		return strings.Contains(p, `"app":"pooldemo"`) && strings.Contains(p, `"backs":20`) && strings.Contains(p, `"locked":0`)
	})

	// The first visitor comes back. Their old client engine socket is told
	// the browser was released, with the address that gives a new one.
	v := visitors[0]
	conn, st2 := dialStatus(t, v.u, "ws://"+c.public+v.loc+"/ws")
	if st2 != http.StatusSwitchingProtocols {
		t.Fatalf("old socket: %d", st2)
	}
	m, err := readText(t, conn)
	if err != nil || m["t"] != "closed" || m["reload"] != "/pooldemo" || !strings.Contains(m["reason"].(string), "released after 2s") {
		t.Fatalf("old socket: %v %v", m, err)
	}
	// Their old Browser URL leads through the strategy to a new browser,
	// whose page says so, and which works (signed in by the pool).
	hops := v.u.open(v.loc)
	last := hops[len(hops)-1]
	if len(hops) != 3 || hops[0].location != "/pooldemo" || last.status != 200 || last.path == v.loc {
		t.Fatalf("old Browser URL: %+v", hops)
	}
	if !strings.Contains(last.body, "Your previous browser was released after 2s without a connection") {
		t.Fatalf("no note on the new browser's page:\n%s", last.body)
	}
	conn, _ = dialStatus(t, v.u, "ws://"+c.public+last.path+"/ws")
	m, err = readText(t, conn)
	page, _ := m["page"].(map[string]any)
	if err != nil || m["t"] != "hello" || !strings.HasSuffix(page["url"].(string), "/search.html") {
		t.Fatalf("new browser: %v %v", m, err)
	}
}

// TestSingleBrowserPerUserLandingShares: the landing page of a
// singleBrowserPerUser app lets the owner share an instance (its instance
// URL opens the owner's browser, so the landing page is where permissions
// are managed); others' instances have no form.
func TestSingleBrowserPerUserLandingShares(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, extra: []string{"--apps", apps}})
	base := "http://" + c.public
	alice := newUser(t, base)
	created := alice.post("/perbrowser", alice.get("/perbrowser").body, "new-instance")
	m := browserURL.FindStringSubmatch(created.location)
	if m == nil {
		t.Fatalf("new instance: %+v", created)
	}
	instURL := "/perbrowser/a/" + m[2]
	land := alice.get("/perbrowser")
	if !strings.Contains(land.body, `<form method="post" action="`+instURL+`" class="share-instance">`) || !strings.Contains(land.body, "only you can use it") {
		t.Fatalf("no share form for alice's instance:\n%s", land.body)
	}
	bob := newUser(t, base)
	if h := bob.get(instURL); h.status != http.StatusForbidden {
		t.Fatalf("bob before the share: %+v", h)
	}
	if h := bob.get("/perbrowser"); strings.Contains(h.body, "share-instance") {
		t.Fatalf("bob's landing page has a share form:\n%s", h.body)
	}
	// Bob cannot share alice's instance with himself.
	if h := bob.post(instURL, bob.get("/perbrowser").body, "grant-instance", "principal", "*", "role", "reader-writer"); h.status != http.StatusForbidden {
		t.Fatalf("bob sharing alice's instance: %+v", h)
	}
	shared := alice.post(instURL, land.body, "grant-instance", "principal", "*", "role", "reader-writer")
	if shared.status != http.StatusSeeOther || shared.location != "/perbrowser" {
		t.Fatalf("share from the landing page: %+v", shared)
	}
	hb := bob.get(instURL)
	if bm := browserURL.FindStringSubmatch(hb.location); hb.status != http.StatusFound || bm == nil || bm[2] != m[2] || bm[3] == m[3] {
		t.Fatalf("bob after the share: %+v", hb)
	}
}

// sampleWith copies a sample app into a directory of its own with some
// manifest fields changed, for --apps.
func sampleWith(t *testing.T, name string, fields map[string]any) string {
	t.Helper()
	src, _ := filepath.Abs(filepath.Join("../../apps", name))
	dir := filepath.Join(t.TempDir(), "apps")
	dst := filepath.Join(dir, name)
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dst, "app.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	maps.Copy(m, fields)
	if raw, err = json.MarshalIndent(m, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "app.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
