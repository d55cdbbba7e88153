// Package migrations loads the numbered SQL files that idem's SQL stores embed. How a
// file is applied (locking, transactions, bookkeeping) belongs to each store; which
// files exist and in what order is decided here, once.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// File is one migration: NNN_description.sql brings the schema to version NNN.
// Files are never edited once released: a change is a new file.
type File struct {
	Version int
	Name    string
	SQL     string
}

// Load returns the *.sql files in dir of fsys in version order. A file whose name does
// not start with a positive version number, or two files with one version, are errors.
func Load(fsys fs.FS, dir string) ([]File, error) {
	paths, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		name := path.Base(p)
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q is not named NNN_description.sql", name)
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Version < files[j].Version })
	for i := 1; i < len(files); i++ {
		if files[i].Version == files[i-1].Version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", files[i-1].Name, files[i].Name, files[i].Version)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	return files, nil
}
