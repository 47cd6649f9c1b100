package engineclient

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

func TestParseFrame(t *testing.T) {
	hdr := []byte(`{"seq":7,"w":10,"h":10,"ts":1700000000123}`)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(hdr)))
	msg = append(append(msg, hdr...), 0xff, 0xd8)
	at := time.Unix(1700000001, 0)
	f, err := ParseFrame(msg, at)
	if err != nil || f.Seq != 7 || !f.Painted.Equal(time.UnixMilli(1700000000123)) || !f.At.Equal(at) || f.Bytes != len(msg) {
		t.Fatalf("%+v %v", f, err)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0, 99, '{'}, {0, 0, 0, 1, '{'}} {
		if _, err := ParseFrame(bad, at); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestTileUpdate(t *testing.T) {
	pack := func(hdr string) []byte {
		msg := binary.BigEndian.AppendUint32(nil, uint32(len(hdr)))
		return append(append(msg, hdr...), 0xff, 0xd8)
	}
	at := time.Unix(1700000001, 0)
	whole, err := ParseFrame(pack(`{"seq":7,"w":1280,"h":720,"ts":1700000000123}`), at)
	if err != nil || whole.Update || whole.W != 1280 || whole.H != 720 {
		t.Fatalf("%+v %v", whole, err)
	}
	u, err := ParseFrame(pack(`{"seq":8,"w":1280,"h":720,"ts":1700000000200,"base":7,"tiles":[[0,0,64,64],[64,0,64,64]]}`), at)
	if err != nil || !u.Update || u.Base != 7 || u.Tiles != 2 || u.Seq != 8 {
		t.Fatalf("%+v %v", u, err)
	}
	empty, err := ParseFrame(pack(`{"seq":9,"w":1280,"h":720,"ts":1700000000300,"base":8,"tiles":[]}`), at)
	if err != nil || !empty.Update || empty.Tiles != 0 {
		t.Fatalf("an update without tiles: %+v %v", empty, err)
	}
	for _, c := range []struct {
		name string
		f    Frame
		last Frame
		ok   bool
		want bool
	}{
		{"whole, first", whole, Frame{}, false, true},
		{"whole on anything", whole, u, true, true},
		{"update on its base", u, whole, true, true},
		{"update, nothing shown", u, Frame{}, false, false},
		{"update on another frame", u, empty, true, false},
		{"update on another size", u, Frame{Seq: 7, W: 640, H: 360}, true, false},
	} {
		if got := c.f.AppliesTo(c.last, c.ok); got != c.want {
			t.Errorf("%s: AppliesTo %v, want %v", c.name, got, c.want)
		}
	}
}

func TestLatencies(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	frames := []Frame{
		{Painted: ms(-5), At: ms(3)},    // painted before key 1, arriving after it: not key 1's
		{Painted: ms(0), At: ms(20)},    // painted in key 1's millisecond: counts
		{Painted: ms(210), At: ms(230)}, // key 2's
		// key 3 (at 400) never shown
	}
	lat, missing := Latencies([]time.Time{ms(0).Add(300 * time.Microsecond), ms(200), ms(400)}, frames)
	want := []time.Duration{20*time.Millisecond - 300*time.Microsecond, 30 * time.Millisecond}
	if !slices.Equal(lat, want) || missing != 1 {
		t.Fatalf("lat %v missing %d, want %v and 1", lat, missing, want)
	}
	if p := Percentile(want, .5); p != want[0] {
		t.Fatalf("p50 %v", p)
	}
	if Percentile(nil, .95) != 0 {
		t.Fatal("percentile of nothing")
	}
}

func TestTyping(t *testing.T) {
	if TypingKey(0) != "a" || TypingKey(19) != "Backspace" || TypingKey(27) != "b" {
		t.Fatal(TypingKey(0), TypingKey(19), TypingKey(27))
	}
	down, up := KeyEvents("a")
	if down["text"] != "a" || down["t"] != "input" || up["type"] != "keyup" {
		t.Fatal(down, up)
	}
	if down, _ := KeyEvents("Backspace"); down["text"] != nil {
		t.Fatal(down)
	}
}
