package bundle

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
)

// examplePool is the example of docs/pools.md.
const examplePool = `{
  "pool": {
    "enabled": true,
    "minSize": 2,
    "maxSize": 5,
    "init": [
      {"navigate": "https://demo.example/login"},
      {"type": "#user", "text": "demo"},
      {"type": "#password", "text": "${secret:DEMO_PASSWORD}"},
      {"click": "button[type=submit]"},
      {"waitURL": "/search", "timeout": "15s"},
      {"waitVisible": "#q"}
    ],
    "back": [
      {"navigate": "https://demo.example/search"},
      {"waitVisible": "#q"}
    ],
    "ttl": "30m",
    "maxIdleToRefresh": "5m",
    "refreshValidationInterval": "30s",
    "touchSession": [{"reload": true}, {"waitVisible": "#q"}],
    "maxIdleToDestroy": "2h",
    "destroyValidationInterval": "1m"
  }
}`

func TestPoolJSON(t *testing.T) {
	var m struct {
		Pool PoolConfig `json:"pool"`
	}
	dec := json.NewDecoder(strings.NewReader(examplePool))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	if err := m.Pool.Validate("pool"); err != nil {
		t.Fatal(err)
	}
	c := m.Pool
	if !c.Enabled || c.MinSize != 2 || c.MaxSize != 5 || len(c.Init) != 6 || len(c.Back) != 2 ||
		c.TTL.D() != 30*time.Minute || c.MaxIdleToRefresh.D() != 5*time.Minute || c.RefreshValidationInterval.D() != 30*time.Second ||
		c.MaxIdleToDestroy.D() != 2*time.Hour || c.DestroyValidationInterval.D() != time.Minute || len(c.TouchSession) != 2 {
		t.Errorf("decoded %+v", c)
	}
	if c.Init[4].Timeout != 15*time.Second || c.Init[2].Text != "${secret:DEMO_PASSWORD}" {
		t.Errorf("init %+v", c.Init)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var again PoolConfig
	if err := json.Unmarshal(raw, &again); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, c) {
		t.Errorf("round trip:\n%s\n%+v", raw, again)
	}
}

func TestPoolDecodeErrorsNameTheField(t *testing.T) {
	for in, want := range map[string]string{
		`{"pool":{"ttl":"5x"}}`:            "pool.ttl",
		`{"pool":{"minSize":"two"}}`:       "pool.minSize",
		`{"pool":{"maxIdleToRefresh":30}}`: "pool.maxIdleToRefresh",
	} {
		var m struct {
			Pool PoolConfig `json:"pool"`
		}
		err := json.Unmarshal([]byte(in), &m)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want it to name %s", in, err, want)
		}
	}
	// 0 is a duration (disabled).
	var c PoolConfig
	if err := json.Unmarshal([]byte(`{"ttl":0,"maxIdleToDestroy":"0s"}`), &c); err != nil || c.TTL != 0 {
		t.Errorf("zero durations: %v", err)
	}
}

func TestPoolValidate(t *testing.T) {
	ok := func() PoolConfig {
		return PoolConfig{Enabled: true, MinSize: 1, MaxSize: 2, Init: sequence.Sequence{sequence.Navigate("http://x.test/")}}
	}
	bad := sequence.Sequence{{Kind: "clik"}}
	for _, tc := range []struct {
		name  string
		edit  func(c *PoolConfig)
		field string
		msg   string
	}{
		{"negative min", func(c *PoolConfig) { c.MinSize = -1 }, "pool.minSize", "negative"},
		{"negative max", func(c *PoolConfig) { c.MaxSize = -1 }, "pool.maxSize", "negative"},
		{"max required", func(c *PoolConfig) { c.MinSize, c.MaxSize = 0, 0 }, "pool.maxSize", "required"},
		{"min > max", func(c *PoolConfig) { c.MinSize = 3 }, "pool.minSize", "greater than maxSize"},
		{"huge max", func(c *PoolConfig) { c.MaxSize = MaxPoolSize + 1 }, "pool.maxSize", "at most"},
		{"negative ttl", func(c *PoolConfig) { c.TTL = sequence.Duration(-time.Second) }, "pool.ttl", "negative"},
		{"negative idle", func(c *PoolConfig) { c.MaxIdleToDestroy = sequence.Duration(-time.Second) }, "pool.maxIdleToDestroy", "negative"},
		{"tiny interval", func(c *PoolConfig) { c.DestroyValidationInterval = sequence.Duration(time.Millisecond) }, "pool.destroyValidationInterval", "at least"},
		{"refresh without touch", func(c *PoolConfig) {
			c.MaxIdleToRefresh, c.RefreshValidationInterval = sequence.Duration(time.Minute), sequence.Duration(time.Minute)
		}, "pool.touchSession", "required"},
		{"unknown step", func(c *PoolConfig) { c.Init = append(c.Init, bad...) }, "pool.init[1]", "unknown step kind"},
		{"bad back step", func(c *PoolConfig) { c.Back = sequence.Sequence{sequence.Click("")} }, "pool.back[0].click", "required"},
		{"variable in init", func(c *PoolConfig) {
			c.Init = sequence.Sequence{sequence.Type("#u", "${user}")}
		}, "pool.init[0].text", "the initialization sequence cannot contain variables"},
		{"variable in touch", func(c *PoolConfig) {
			c.TouchSession = sequence.Sequence{sequence.Navigate("http://x.test/${p}")}
		}, "pool.touchSession[0].navigate", "cannot contain variables"},
		{"unknown type", func(c *PoolConfig) { c.BrowserType = "msie" }, "pool.browserType", "not one of chromium"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok()
			tc.edit(&c)
			err := c.Validate("pool")
			var es sequence.Errors
			if !errors.As(err, &es) {
				t.Fatalf("err %v", err)
			}
			found := false
			for _, e := range es {
				if e.Field == tc.field && strings.Contains(e.Msg, tc.msg) {
					found = true
				}
			}
			if !found {
				t.Errorf("errors %v, want %s: ...%s...", es, tc.field, tc.msg)
			}
		})
	}
	// Every problem at once.
	c := PoolConfig{Enabled: true, MinSize: -1, MaxSize: -2, TTL: sequence.Duration(-1)}
	if es := c.Validate("pool").(sequence.Errors); len(es) != 3 {
		t.Errorf("errors %v", es)
	}
	// Secrets are fine in init; a disabled pool needs no sizes; a pool
	// with only sizes is fine.
	s := PoolConfig{Enabled: true, MaxSize: 1, Init: sequence.Sequence{sequence.Type("#p", "${secret:PW}")}}
	for _, c := range []PoolConfig{s, {}, {Enabled: true, MaxSize: 1}} {
		if err := c.Validate("pool"); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
