package main

import (
	"reflect"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// fieldFlags maps the Config fields of master, worker and proxy (as named
// in their *config.FieldError) to the flags that set them, so a bad value
// is reported by the flag the user typed. One map serves every command: a
// field name means the same flag wherever it occurs.
func fieldFlags() map[string]string {
	m := map[string]string{
		// master.Config
		"RMIAddr": "--rmi", "AdminAddr": "--admin", "PublicAddr": "--listen", "GossipAddr": "--gossip",
		"Proxies": "--proxies", "PublicURL": "--public-url", "AutomationMaxSessions": "--automation-max-sessions",
		"Login.MaxFailures": "--login-max-failures", "Login.MaxFailuresPerIP": "--login-max-failures-per-ip",
		"Login.Window": "--login-window", "Login.Lockout": "--login-lockout", "Login.MaxLockout": "--login-max-lockout",
		// worker.Config and proxy.ProcessConfig
		"Master": "--master", "Listen": "--listen", "ID": "--id", "EgressAllow": "--egress-allow",
		"MaxBrowsers": "--max-browsers", "GeneralMin": "--general-pool-min", "JobSlots": "--job-slots",
		"MaxAppBytes": "--max-app-bytes", "RestAfter": "--rest-after",
		"Grade.High": "--frame-latency-high", "Grade.Low": "--frame-latency-low", "Grade.MinScale": "--frame-scale-min",
		"Grade.Sharpen": "--frame-sharpen", "RenderScale": "--render-scale", "SocketURL": "--socket-url",
	}
	for _, f := range quotaFlagList {
		m["Quotas."+quotaFieldName(f)] = "--quota-" + f.name
	}
	return m
}

// quotaFieldName is the wire.Quotas field a quota flag sets.
func quotaFieldName(f quotaFlag) string {
	var q wire.Quotas
	p := f.field(&q)
	v := reflect.ValueOf(&q).Elem()
	for i := range v.NumField() {
		if v.Field(i).Addr().Interface() == any(p) {
			return v.Type().Field(i).Name
		}
	}
	panic("quota flag --quota-" + f.name + " sets no field of wire.Quotas")
}
