package master

import (
	"reflect"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// ValidateQuotas reports the first bad quota as a *config.FieldError
// naming the field of Config ("Quotas.BrowsersPerUser"). 0 disables a
// limit; negative values are refused.
func ValidateQuotas(q wire.Quotas) error {
	v := reflect.ValueOf(q)
	for i := range v.NumField() {
		if n := v.Field(i); n.Kind() == reflect.Int && n.Int() < 0 {
			return config.Errorf("Quotas."+v.Type().Field(i).Name, "must be 0 (no limit) or more, got %d", n.Int())
		}
	}
	return nil
}

// maxIdentityKeys bounds the addresses whose identity buckets are kept.
const maxIdentityKeys = 100_000
