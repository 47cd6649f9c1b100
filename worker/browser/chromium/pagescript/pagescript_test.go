package pagescript

import "testing"

func TestBindingName(t *testing.T) {
	for name, want := range map[string]bool{
		"cloudbrowser": true, "_x$1": true, "$": true,
		"": false, "1x": false, "a-b": false, "a.b": false,
		TitleBinding: false, CopyBinding: false,
	} {
		if got := BindingName(name); got != want {
			t.Errorf("BindingName(%q) = %v", name, got)
		}
	}
}
