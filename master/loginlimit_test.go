package master

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
)

// TestNewLoginLimits: the master takes the defaults for zero fields of its
// login limits and refuses bad ones.
func TestNewLoginLimits(t *testing.T) {
	if _, err := New(Config{Secret: testSecret, AdminToken: "t", Login: auth.LoginLimits{Lockout: -1}, Logger: zerolog.Nop()}); err == nil || !strings.Contains(err.Error(), "Login.Lockout") {
		t.Errorf("New with a negative lockout: %v", err)
	}
	m, err := New(Config{Secret: testSecret, AdminToken: "t", Login: auth.LoginLimits{Lockout: time.Hour}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if d := m.cfg.Login; d.MaxLockout != time.Hour || d.MaxFailures != 5 {
		t.Errorf("defaults around a long first lockout: %+v", d)
	}
}

// TestAccountsLoginOverRMI: the Accounts object answers Login (with the
// lockout) and the older Verify, as the workers call them.
func TestAccountsLoginOverRMI(t *testing.T) {
	clock := clocktest.New(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := New(Config{Secret: testSecret, AdminToken: "tok", Logger: zerolog.Nop(), Clock: clock,
		Login: auth.LoginLimits{MaxFailures: 2, Lockout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.access.Accounts().Add("alice", "correct horse"); err != nil {
		t.Fatal(err)
	}
	w := addWorker(t, m, "w-login")
	login := func(pw string) wire.LoginResult {
		t.Helper()
		res, err := contract.AccountsClient{C: w.conn}.Login(context.Background(),
			wire.LoginRequest{User: "alice", Password: pw, ClientIP: "192.0.2.1", RequestID: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	verify := func(pw string) bool {
		t.Helper()
		ok, err := contract.AccountsClient{C: w.conn}.Verify(context.Background(), "alice", pw)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if r := login("correct horse"); !r.OK {
		t.Fatalf("right password: %+v", r)
	}
	if r := login("wrong password"); r != (wire.LoginResult{}) {
		t.Fatalf("wrong password: %+v", r)
	}
	if verify("wrong password") {
		t.Fatal("Verify accepted a wrong password")
	}
	if r := login("correct horse"); r.OK || r.RetryAfter != 60 {
		t.Fatalf("locked: %+v", r)
	}
	if verify("correct horse") {
		t.Fatal("Verify accepted a locked name")
	}
	clock.Advance(time.Minute)
	if !verify("correct horse") {
		t.Fatal("Verify after the lockout")
	}
	if v := testutilCounter(t, m, "cloudbrowser_master_login_lockouts_total", "user"); v != 1 {
		t.Errorf("lockouts metric %v, want 1", v)
	}
}

// testutilCounter reads one labelled counter from the master's registry.
func testutilCounter(t *testing.T, m *Master, name, label string) float64 {
	t.Helper()
	fams, err := m.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetValue() == label {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
