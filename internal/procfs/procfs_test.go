package procfs

import (
	"errors"
	"os"
	"slices"
	"testing"
)

func TestParseStat(t *testing.T) {
	// pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime prio nice threads itreal starttime vsize
	tail := " 1 1 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000"
	tests := []struct {
		name    string
		line    string
		want    Stat
		wantErr bool
	}{
		{"plain", "42 (proxy) S 7" + tail, Stat{Pid: 42, PPid: 7, State: 'S', Start: 987654, UTime: 5, STime: 3}, false},
		{"command with spaces and parens", "42 (a) b (c)) Z 1" + tail, Stat{Pid: 42, PPid: 1, State: 'Z', Start: 987654, UTime: 5, STime: 3}, false},
		{"with rss (pages)", "42 (proxy) S 7" + tail + " 25", Stat{Pid: 42, PPid: 7, State: 'S', Start: 987654, UTime: 5, STime: 3, RSS: 25 * uint64(os.Getpagesize())}, false},
		{"short", "42 (x) S 1 2 3", Stat{}, true},
		{"no command", "garbage", Stat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.line))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSelf(t *testing.T) {
	if _, err := os.Stat(Dir); err != nil {
		t.Skip("no /proc")
	}
	st, err := ReadStat(os.Getpid())
	if err != nil || !st.Alive() || st.Pid != os.Getpid() || st.Start == 0 || st.RSS == 0 {
		t.Fatalf("self stat %+v, %v", st, err)
	}
	args, err := Cmdline(os.Getpid())
	if err != nil || !slices.Equal(args, os.Args) {
		t.Fatalf("cmdline %q, %v; want %q", args, err, os.Args)
	}
	if _, err := ReadStat(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("missing pid: %v", err)
	}
}

// TestReadAll: the real table lists this process with its parent; non-pid
// entries and unreadable ones are skipped.
func TestReadAll(t *testing.T) {
	procs, err := ReadAll()
	if err != nil {
		t.Skip("no /proc:", err)
	}
	me, ok := procs[os.Getpid()]
	if !ok || me.PPid != os.Getppid() || !me.Alive() || me.Start == 0 {
		t.Fatalf("self: %+v (listed %v)", me, ok)
	}
}

func TestParseMemAvailable(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want uint64
		ok   bool
	}{
		{"linux", "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\nBuffers: 1 kB\n", 20000000 * 1024, true},
		{"missing", "MemTotal: 1 kB\n", 0, false},
		{"not kB", "MemAvailable: 5 MB\n", 0, false},
		{"garbage", "MemAvailable: lots kB\n", 0, false},
	}
	for _, tc := range tests {
		got, err := parseMemAvailable([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: %d %v, want %d ok=%v", tc.name, got, err, tc.want, tc.ok)
		}
	}
	if n, err := MemAvailable(); err != nil || n == 0 {
		t.Errorf("this machine: %d %v", n, err)
	}
}

func TestParsePSS(t *testing.T) {
	const rollup = `55d0c0a00000-7ffd5a1fe000 ---p 00000000 00:00 0                          [rollup]
Rss:              123456 kB
Pss:               45678 kB
Pss_Anon:          30000 kB
Shared_Clean:      10000 kB
`
	v, err := ParsePSS([]byte(rollup))
	if err != nil || v != 45678*1024 {
		t.Fatalf("%d %v", v, err)
	}
	if _, err := ParsePSS([]byte("Rss: 1 kB\n")); err == nil {
		t.Fatal("missing Pss accepted")
	}
}

func TestTree(t *testing.T) {
	procs := map[int]Stat{
		1:  {Pid: 1, PPid: 0, State: 'S'},
		10: {Pid: 10, PPid: 1, State: 'S'},  // chromium main
		11: {Pid: 11, PPid: 10, State: 'S'}, // zygote
		12: {Pid: 12, PPid: 11, State: 'S'}, // renderer
		13: {Pid: 13, PPid: 11, State: 'Z'}, // exited renderer
		14: {Pid: 14, PPid: 10, State: 'S'}, // utility
		20: {Pid: 20, PPid: 1, State: 'S'},  // unrelated
		21: {Pid: 21, PPid: 20, State: 'S'},
	}
	got := Tree(procs, 10)
	slices.Sort(got)
	if !slices.Equal(got, []int{10, 11, 12, 14}) {
		t.Fatalf("tree %v", got)
	}
	if got := Tree(procs, 99); len(got) != 0 {
		t.Fatalf("tree of missing pid %v", got)
	}
}
