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
		{"plain", "42 (proxy) S 7" + tail, Stat{Pid: 42, PPid: 7, State: 'S', Start: 987654}, false},
		{"command with spaces and parens", "42 (a) b (c)) Z 1" + tail, Stat{Pid: 42, PPid: 1, State: 'Z', Start: 987654}, false},
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
	if err != nil || !st.Alive() || st.Pid != os.Getpid() || st.Start == 0 {
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
