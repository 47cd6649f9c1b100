package rmi

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

type fuzzInner struct {
	X int            `codec:"x"`
	M map[string]any `codec:"m"`
}

type fuzzArg struct {
	Name  string       `codec:"name"`
	N     uint64       `codec:"n"`
	When  time.Time    `codec:"when"`
	Data  []byte       `codec:"data"`
	Items []fuzzInner  `codec:"items"`
	Ptr   *fuzzInner   `codec:"ptr"`
	Map   map[int]bool `codec:"map"`
}

// argTypes are the parameter types the fuzzer decodes call args into, as a
// callee would.
var argTypes = []reflect.Type{
	reflect.TypeFor[int](), reflect.TypeFor[string](), reflect.TypeFor[[]byte](),
	reflect.TypeFor[fuzzArg](), reflect.TypeFor[*fuzzArg](), reflect.TypeFor[any](),
	reflect.TypeFor[map[string]any](), reflect.TypeFor[[]fuzzInner](), reflect.TypeFor[time.Time](),
	refPtrType,
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame reader and message
// decoder (what a hostile peer controls) and decodes call arguments into
// typed parameters. None of it may panic; whatever decodes must re-encode.
func FuzzDecodeFrame(f *testing.F) {
	arg := fuzzArg{Name: "x", N: 1 << 63, When: time.Unix(1700000000, 5).UTC(), Data: []byte{1, 2},
		Items: []fuzzInner{{X: 1, M: map[string]any{"a": 1.5}}}, Ptr: &fuzzInner{X: 2}, Map: map[int]bool{3: true}}
	seeds := []*message{
		{Kind: kindCall, Seq: 1, Object: "master", Method: "Add", Timeout: int64(time.Second),
			Args: []codec.Raw{mustRaw(f, 1), mustRaw(f, "two"), mustRaw(f, arg), refToken(9)}},
		{Kind: kindCall, Seq: 2, Ref: 3, Method: "Inc"},
		{Kind: kindReply, Seq: 1, Result: mustRaw(f, arg)},
		{Kind: kindReply, Seq: 2, Err: &wireError{Code: CodeNoObject, Message: "no"}},
		{Kind: kindReply, Seq: 3, Result: refToken(4)},
		{Kind: kindCancel, Seq: 5},
		{Kind: kindRelease, Seq: 6},
	}
	var all []byte
	for _, m := range seeds {
		fr := frame(mustEncode(f, m))
		f.Add(fr)
		all = append(all, fr...)
	}
	f.Add(all)
	f.Add(frame(mustRaw(f, &hsClient{Version: protocolVersion, Name: "w", Nonce: make([]byte, 32), MAC: make([]byte, 32), Role: "worker"})))
	f.Add([]byte{0, 0, 0, 3, 0xc1, 0xc1, 0xc1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0})

	dummy := &Conn{}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			m, err := readMessage(r, 1<<16)
			if err != nil {
				return
			}
			for _, a := range m.Args {
				for _, typ := range argTypes {
					_, _ = dummy.decodeArg(a, typ)
				}
			}
			var sink fuzzArg
			_ = unmarshal(m.Result, &sink)
			if _, err := encodeMessage(m); err != nil {
				t.Fatalf("decoded message does not re-encode: %v (%+v)", err, m)
			}
		}
	})
}
