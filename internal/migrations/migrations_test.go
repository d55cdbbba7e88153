package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadOrdersByVersion(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/10_later.sql": {Data: []byte("B")},
		"m/2_first.sql":  {Data: []byte("A")},
		"m/readme.txt":   {Data: []byte("ignored")},
	}
	files, err := Load(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Version != 2 || files[1].Version != 10 || files[1].SQL != "B" {
		t.Fatalf("Load = %+v, want versions 2 then 10 (numeric, not lexical, order)", files)
	}
}

func TestLoadRejectsBadNames(t *testing.T) {
	t.Parallel()
	for name, fsys := range map[string]fstest.MapFS{
		"no version": {"m/init.sql": {}},
		"duplicate":  {"m/1_a.sql": {}, "m/01_b.sql": {}},
		"empty":      {"m/x.txt": {}},
	} {
		if _, err := Load(fsys, "m"); err == nil || !strings.Contains(err.Error(), "migration") {
			t.Errorf("%s: Load = %v, want an error naming the migration problem", name, err)
		}
	}
}
