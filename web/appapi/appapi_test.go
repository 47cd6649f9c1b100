package appapi

import (
	"strings"
	"testing"
)

func TestScriptEmbedsConfig(t *testing.T) {
	s := Script(Config{Binding: "__cbCall", Origin: "http://127.0.0.1:1", Token: "tok", User: `a"</script>`})
	if strings.Contains(s, "__CB_CONFIG__") {
		t.Fatal("placeholder left in the script")
	}
	for _, want := range []string{`"token":"tok"`, `"origin":"http://127.0.0.1:1"`, `"user":"a\"\u003c/script\u003e"`} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %s", want)
		}
	}
}
