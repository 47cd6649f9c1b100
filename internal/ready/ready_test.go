package ready

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	if _, err := Read(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("before Write: %v, want not exist", err)
	}
	if err := Write(path, "master", map[string]string{"rmi": "127.0.0.1:1", "admin": ""}); err != nil {
		t.Fatal(err)
	}
	f, err := Read(path)
	want := File{Role: "master", Pid: os.Getpid(), Addrs: map[string]string{"rmi": "127.0.0.1:1"}}
	if err != nil || !reflect.DeepEqual(f, want) {
		t.Fatalf("Read = %+v %v, want %+v", f, err, want)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Fatalf("garbage: %v", err)
	}
}
