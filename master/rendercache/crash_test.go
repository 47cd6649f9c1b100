package rendercache

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

const crashEnv = "RENDERCACHE_CRASH_DB"

// TestCrashWriter is the child of TestCrashKill9: it rewrites entries as
// fast as it can and reports each completed version on stdout until it is
// killed. It does nothing when run on its own.
func TestCrashWriter(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("child process of TestCrashKill9")
	}
	st, err := state.Open(path)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	c, err := New(Config{Store: st, MaxBytes: 64 << 10, Logger: zerolog.Nop()})
	if err != nil {
		fmt.Println("new:", err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		sig, cu, _ := Key(specFor(i%5), false, nil)
		if _, err := c.Reserve(sig, cu, fmt.Sprint("w", i), NoCache); err != nil {
			fmt.Println("reserve:", err)
			os.Exit(2)
		}
		// Sizes vary so versions cannot pass for each other; the total
		// goes over MaxBytes so evictions happen too.
		body := bytes.Repeat([]byte{byte('a' + i%26)}, 1000+(i*7919)%20000)
		if _, _, err := c.Complete(sig, fmt.Sprint("w", i), Render{ContentType: "text/plain", Body: body}); err != nil {
			fmt.Println("complete:", err)
			os.Exit(2)
		}
		fmt.Println("done", i)
	}
}

// TestCrashKill9: a master killed (SIGKILL) while writing the cache leaves
// nothing half-written: after reopening, every index record has exactly
// its own body (size and hash agree), there are no orphan bodies, and the
// counted size matches the index.
func TestCrashKill9(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("in the child")
	}
	path := filepath.Join(t.TempDir(), state.FileName)
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriter$", "-test.v")
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it mid-stream: after a number of completed writes that
		// differs per round.
		sc := bufio.NewScanner(out)
		seen := 0
		for sc.Scan() && seen < 20+round*37 {
			if strings.HasPrefix(sc.Text(), "done") {
				seen++
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if seen == 0 {
			t.Fatalf("round %d: the writer wrote nothing", round)
		}
		checkConsistent(t, path)
	}
}

func checkConsistent(t *testing.T, path string) {
	t.Helper()
	st, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := New(Config{Store: st, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	var total int64
	for sig, raw := range st.All(BucketIndex) {
		var ix indexRec
		if err := json.Unmarshal(raw, &ix); err != nil {
			t.Fatalf("index %s: %v", sig, err)
		}
		want[blobKey(sig, ix.Version)] = true
		total += ix.Size
		res, err := c.Lookup(sig, NoCache)
		if err != nil || res.Entry == nil {
			t.Fatalf("entry %s after crash: %v", sig, err)
		}
		if res.Entry.Hash != hashOf(res.Entry.Body) || int64(len(res.Entry.Body)) != ix.Size {
			t.Fatalf("entry %s v%d: body does not match its record", sig, ix.Version)
		}
	}
	for k := range st.All(BucketBlobs) {
		if !want[k] {
			t.Fatalf("orphan body %s", k)
		}
	}
	if s := c.Stats(); s.Bytes != total || s.Entries != int64(len(want)) || total > 64<<10 {
		t.Fatalf("stats = %+v, index total %d", s, total)
	}
	// Every URL link names a signature that has an entry or reservation.
	res := st.All(BucketReservations)
	for _, raw := range st.All(BucketURLs) {
		var u urlRec
		_ = json.Unmarshal(raw, &u)
		for _, s := range u.Sigs {
			if !st.Has(BucketIndex, s) && res[s] == nil {
				t.Fatalf("dangling URL link %s → %s", u.URL, s)
			}
		}
	}
}
