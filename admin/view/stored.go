package view

import "github.com/idemhq/idem/idemhttp"

// MaxPreviewHeaders bounds the header fields a StoredHTTP lists.
const MaxPreviewHeaders = 32

// StoredHTTP is a key's stored result read as the response idemhttp's Middleware
// (and idem serve) stored for replay: its status, its headers and a preview of its
// body. Every string is bounded (PreviewBytes a value, MaxPreviewHeaders fields) and
// cleaned: invalid UTF-8 and control characters show as '?'.
type StoredHTTP struct {
	Status int `json:"status"`
	// NotStored: the response was sent once but was too large to store for replay;
	// Body.Size is its size, and a retry with the key is answered 409.
	NotStored bool `json:"not_stored,omitempty"`
	// ContentType is the stored Content-Type header ("" if none).
	ContentType string        `json:"content_type"`
	Headers     []HeaderField `json:"headers"`
	// HeaderCount is the number of stored fields; HeadersTruncated is set when it is
	// more than MaxPreviewHeaders and only the first are listed.
	HeaderCount      int         `json:"header_count"`
	HeadersTruncated bool        `json:"headers_truncated"`
	Body             BodyPreview `json:"body"`
}

// HeaderField is one stored header value; Truncated is set when the value was cut
// at PreviewBytes.
type HeaderField struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Truncated bool   `json:"truncated,omitempty"`
}

// DecodeStoredHTTP returns the view of result when it is a response stored by
// idemhttp (idemhttp.DecodeStored), and false for any other bytes (an inbox's or an
// effect's result), which keep their plain Preview. GET /api/keys, the console and
// idem keys show stored responses through it.
func DecodeStoredHTTP(result []byte) (StoredHTTP, bool) {
	r, err := idemhttp.DecodeStored(result)
	if err != nil {
		return StoredHTTP{}, false
	}
	v := StoredHTTP{Status: r.Status, NotStored: r.NotStored, HeaderCount: len(r.Header),
		HeadersTruncated: len(r.Header) > MaxPreviewHeaders, Headers: []HeaderField{}}
	for i, f := range r.Header {
		if f.Name == "Content-Type" && v.ContentType == "" {
			v.ContentType = Clean(f.Value, PreviewBytes)
		}
		if i < MaxPreviewHeaders {
			v.Headers = append(v.Headers, HeaderField{Name: Clean(f.Name, PreviewBytes), Value: Clean(f.Value, PreviewBytes),
				Truncated: len(f.Name) > PreviewBytes || len(f.Value) > PreviewBytes})
		}
	}
	v.Body = NewBodyPreview(r.Body, int64(r.Size))
	return v, true
}
