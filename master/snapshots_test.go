package master

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

func snap(bid, url string) *wire.BrowserSnapshot {
	return &wire.BrowserSnapshot{ID: bid, Owner: "alice", URL: url, Width: 800, Height: 600, Origin: "http://x.test",
		Local: map[string]string{"k": "v"}, Cookies: []wire.SnapshotCookie{{Name: "sid", Value: "1", Domain: "x.test", Path: "/"}}}
}

// Browser snapshots are stored per browser under the instance (the last
// one wins), removed on request, refused under a fenced epoch, when
// oversized or malformed, and read back in id order by pages.
func TestBrowserSnapshotStore(t *testing.T) {
	s, st := openStates(t, filepath.Join(t.TempDir(), "state.db"), map[uint64]bool{3: true})
	defer st.Close()
	ids := func() []string {
		var out []string
		after := ""
		for {
			page, err := s.browsers(testIID, after)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range page.Browsers {
				out = append(out, b.ID+"="+b.URL)
				after = b.ID
			}
			if !page.More {
				return out
			}
		}
	}
	for _, tc := range []struct {
		name string
		req  wire.SaveBrowser
		err  string
		want string // the stored snapshots after the step
	}{
		{"save", wire.SaveBrowser{Instance: testIID, Epoch: 1, Snapshot: snap("bbb", "http://x.test/1")}, "", "bbb=http://x.test/1"},
		{"save another", wire.SaveBrowser{Instance: testIID, Epoch: 1, Snapshot: snap("aaa", "http://x.test/a")}, "", "aaa=http://x.test/a bbb=http://x.test/1"},
		{"replace", wire.SaveBrowser{Instance: testIID, Epoch: 1, Snapshot: snap("bbb", "http://x.test/2")}, "", "aaa=http://x.test/a bbb=http://x.test/2"},
		{"fenced epoch", wire.SaveBrowser{Instance: testIID, Epoch: 3, Snapshot: snap("bbb", "http://x.test/3")}, "taken over", "aaa=http://x.test/a bbb=http://x.test/2"},
		{"fenced removal", wire.SaveBrowser{Instance: testIID, Epoch: 3, Remove: "aaa"}, "taken over", "aaa=http://x.test/a bbb=http://x.test/2"},
		{"bad instance", wire.SaveBrowser{Instance: "nonsense", Snapshot: snap("ccc", "u")}, "invalid instance id", "aaa=http://x.test/a bbb=http://x.test/2"},
		{"bad browser id", wire.SaveBrowser{Instance: testIID, Snapshot: snap("../x", "u")}, "valid browser id", "aaa=http://x.test/a bbb=http://x.test/2"},
		{"nothing named", wire.SaveBrowser{Instance: testIID}, "valid browser id", "aaa=http://x.test/a bbb=http://x.test/2"},
		{"oversized", wire.SaveBrowser{Instance: testIID, Snapshot: &wire.BrowserSnapshot{ID: "ccc", Local: map[string]string{"k": strings.Repeat("x", maxSnapshotBytes)}}}, "over", "aaa=http://x.test/a bbb=http://x.test/2"},
		{"remove", wire.SaveBrowser{Instance: testIID, Epoch: 1, Remove: "aaa"}, "", "bbb=http://x.test/2"},
		{"remove again", wire.SaveBrowser{Instance: testIID, Epoch: 1, Remove: "aaa"}, "", "bbb=http://x.test/2"},
	} {
		err := s.saveBrowser(tc.req)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Fatalf("%s: error %v, want %q", tc.name, err, tc.err)
		}
		if got := strings.Join(ids(), " "); got != tc.want {
			t.Fatalf("%s: stored %q, want %q", tc.name, got, tc.want)
		}
	}
	got, _ := s.browsers(testIID, "")
	if b := got.Browsers[0]; b.Owner != "alice" || b.Width != 800 || b.Local["k"] != "v" || len(b.Cookies) != 1 || b.Cookies[0].Name != "sid" {
		t.Fatalf("snapshot read back: %+v", b)
	}
	// Shared state and snapshots share the bucket without mixing.
	if _, err := s.write(wire.StateWrite{Instance: testIID, Op: wire.StateSet, Key: "zz", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.getAll(testIID); len(all.Values) != 1 {
		t.Fatalf("state values: %+v", all.Values)
	}
	// Pages: several large snapshots come back in more than one page, all of them.
	big := strings.Repeat("y", 1<<20)
	for _, bid := range []string{"p1", "p2", "p3", "p4", "p5"} {
		sn := snap(bid, "http://x.test/"+bid)
		sn.Local = map[string]string{"big": big}
		if err := s.saveBrowser(wire.SaveBrowser{Instance: testIID, Epoch: 1, Snapshot: sn}); err != nil {
			t.Fatal(err)
		}
	}
	if first, _ := s.browsers(testIID, ""); !first.More {
		t.Fatal("6 snapshots over 5 MiB in one page")
	}
	if n := len(ids()); n != 6 {
		t.Fatalf("%d snapshots read by pages, want 6", n)
	}
	if err := s.drop(testIID); err != nil {
		t.Fatal(err)
	}
	if n := len(ids()); n != 0 {
		t.Fatalf("%d snapshots after the instance was dropped", n)
	}
}

// Over RMI: only the hosting worker saves and reads its instance's
// snapshots (cookies and storage: another worker's read is refused).
func TestBrowserSnapshotService(t *testing.T) {
	m := startMaster(t, "")
	iid := "w-one.abcabcabc"
	one := addWorker(t, m, "w-one", wire.InstanceInfo{ID: iid, App: "multi", Owner: "alice", Worker: "w-one"})
	two := addWorker(t, m, "w-two")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	save := func(f *fakeWorker, req wire.SaveBrowser) error {
		return contract.InstanceStateClient{C: f.conn}.SaveBrowser(ctx, req)
	}
	if err := save(one, wire.SaveBrowser{Instance: iid, Snapshot: snap("b1", "http://x.test/")}); err != nil {
		t.Fatalf("host's save: %v", err)
	}
	if err := save(two, wire.SaveBrowser{Instance: iid, Snapshot: snap("b2", "http://x.test/")}); err == nil || !strings.Contains(err.Error(), "not by the caller") {
		t.Fatalf("another worker's save: %v", err)
	}
	if err := save(two, wire.SaveBrowser{Instance: iid, Remove: "b1"}); err == nil {
		t.Fatal("another worker removed a snapshot")
	}
	if got, err := (contract.InstanceStateClient{C: two.conn}).Browsers(ctx, iid, ""); err == nil || len(got.Browsers) != 0 {
		t.Fatalf("another worker read the snapshots: %+v %v", got, err)
	}
	got, err := contract.InstanceStateClient{C: one.conn}.Browsers(ctx, iid, "")
	if err != nil || len(got.Browsers) != 1 || got.Browsers[0].ID != "b1" || got.Browsers[0].Local["k"] != "v" {
		t.Fatalf("browsers: %+v %v", got, err)
	}
	if err := save(one, wire.SaveBrowser{Instance: iid, Remove: "b1"}); err != nil {
		t.Fatal(err)
	}
	got, err = contract.InstanceStateClient{C: one.conn}.Browsers(ctx, iid, "")
	if err != nil || len(got.Browsers) != 0 {
		t.Fatalf("after removal: %+v %v", got, err)
	}
}

// TestInstanceStateView: the admin's view of an instance's stored state
// answers for an instance with browser snapshots and no shared state, and
// for a live one with neither yet; only an instance the master knows
// nothing of is 404.
func TestInstanceStateView(t *testing.T) {
	m, srv := apiMaster(t)
	const snapped = "w-one.snapsnapsnap"
	a := addWorker(t, m, "w-one", wire.InstanceInfo{ID: snapped, App: "multi", Owner: "alice", Worker: "w-one"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := (contract.InstanceStateClient{C: a.conn}).SaveBrowser(ctx, wire.SaveBrowser{Instance: snapped, Snapshot: snap("b1", "http://x.test/")}); err != nil {
		t.Fatal(err)
	}
	live, err := a.place(t, "notes", "bob")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, iid string
		status    int
		want      string
	}{
		{"snapshots, no shared state", snapped, 200, `"id": "b1"`},
		{"live, nothing stored yet", live.InstanceID, 200, `"found": false`},
		{"unknown", "w-one.nosuchinstance", 404, "no stored state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := call(t, srv, "admintok", "GET", "/api/v1/instances/"+tc.iid+"/state", nil)
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("%d %s, want %d with %q", status, body, tc.status, tc.want)
			}
		})
	}
}
