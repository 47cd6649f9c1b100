package chromium

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestZZProcs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := New(ctx, Config{Logger: zerolog.Nop(), ExtraFlags: strings.Fields(os.Getenv("ZZ_FLAGS"))})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	self := os.Getpid()
	dump := func(label string) {
		all, _ := procfs.ReadAll()
		mine := map[int]bool{self: true}
		for changed := true; changed; {
			changed = false
			for pid, st := range all {
				if !mine[pid] && mine[st.PPid] {
					mine[pid], changed = true, true
				}
			}
		}
		types := map[string]int{}
		for pid := range mine {
			if pid == self {
				continue
			}
			args, _ := procfs.Cmdline(pid)
			line := strings.Join(args, " ")
			typ, extra := "browser", ""
			for _, a := range strings.Fields(line) {
				if strings.HasPrefix(a, "--type=") {
					typ = strings.TrimPrefix(a, "--type=")
				}
				if strings.HasPrefix(a, "--utility-sub-type=") {
					extra = strings.TrimPrefix(a, "--utility-sub-type=")
				}
				if strings.HasPrefix(a, "--extension-process") {
					extra += " extension"
				}
			}
			if !strings.Contains(line, "chrom") {
				typ = "other: " + line
				if len(typ) > 60 {
					typ = typ[:60]
				}
			}
			types[typ+" "+extra]++
		}
		keys := make([]string, 0, len(types))
		for k := range types {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(os.Stderr, "%s:\n", label)
		for _, k := range keys {
			fmt.Fprintf(os.Stderr, "  %3d %s\n", types[k], k)
		}
	}
	dump("0 browsers")
	var bs []browser.Browser
	for i := range 5 {
		b, err := rt.NewBrowser(ctx, browser.Options{URL: fmt.Sprintf("data:text/html,<title>%d</title><p>hello", i)})
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	time.Sleep(2 * time.Second)
	dump("5 browsers")
	r := rt
	r.mu.Lock()
	p := r.slots[0].proc
	r.mu.Unlock()
	c := chromedp.FromContext(p.rootCtx)
	res, err := cdp.Call(p.rootCtx, c.Browser, target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range res.TargetInfos {
		fmt.Fprintf(os.Stderr, "target %s %q ctx=%s attached=%v\n", ti.Type, ti.URL, ti.BrowserContextID, ti.Attached)
	}
	for _, b := range bs {
		b.Close(ctx)
	}
}
