package integrations

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/retryfuse/retryfuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The AWS SDK for Go v2 (S3) under a retryfuse.Transport.
//
// The recipe: the SDK owns the retries (its standard retryer, 3 attempts)
// and retryfuse makes one attempt (MaxAttempts 1), bounded by
// AttemptTimeout; the SDK's retryer gets one more check, put first, that
// refuses a *retryfuse.ReconcileRequiredError.
//
// What the SDK does, read from aws-sdk-go-v2 v1.48.0 and smithy-go v1.28.9:
//
//   - Its retryables are asked in order and the first answer that is not
//     "unknown" wins. RetryableConnectionError answers true for any error
//     the HTTP client returns (smithy wraps it in a *RequestSendError, a
//     ConnectionError), a reconcile error included: the refusing check must
//     come before it. Appended after the defaults it is never asked.
//   - smithy builds each attempt's request with a Body and no GetBody, so
//     retryfuse can never repeat an SDK request that has a body (PutObject,
//     CompleteMultipartUpload...); it can repeat bodiless ones (GetObject,
//     HeadObject), which is where retries on top of the SDK's multiply.
//   - When the caller's context is done, smithy replaces the HTTP client's
//     error with a *smithy.CanceledError holding only the context's error:
//     the reconcile error is dropped. Hence AttemptTimeout in the recipe,
//     shorter than the caller's deadline: a lost response then comes back
//     while the context is alive, with the reconcile error in the chain
//     (*smithy.OperationError → *smithyhttp.RequestSendError → *url.Error →
//     *retryfuse.ReconcileRequiredError).
//
// Tests set the SDK's backoff to 1 ms to stay quick; no count depends on it.

// refuseReconcile is the check the recipe puts first in the SDK's
// retryables: a write whose outcome is uncertain is never sent again.
var refuseReconcile = retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
	var rec *retryfuse.ReconcileRequiredError
	if errors.As(err, &rec) {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
})

// checkAt says where a retryer has the refusing check.
type checkAt int

const (
	noCheck     checkAt = iota
	checkFirst          // the recipe
	checkAppend         // after the SDK's defaults
)

// s3Retryer returns the SDK's standard retryer (3 attempts) with the
// refusing check where at says, and a 1 ms backoff.
func s3Retryer(at checkAt) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		switch at {
		case checkFirst:
			o.Retryables = append([]retry.IsErrorRetryable{refuseReconcile}, o.Retryables...)
		case checkAppend:
			o.Retryables = append(o.Retryables, refuseReconcile)
		}
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}

// recipeTransport is retryfuse as the recipe has it under the SDK.
func recipeTransport(t *testing.T) *retryfuse.Transport {
	return fast(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{MaxAttempts: 1, AttemptTimeout: attemptTimeout}})
}

func s3Client(base string, tr *retryfuse.Transport, retryer aws.Retryer) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(base),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDFAKE", "secretfake", ""),
		// No Timeout: the deadline goes on the context, and each attempt is
		// bounded by retryfuse's AttemptTimeout.
		HTTPClient: &http.Client{Transport: tr},
		Retryer:    retryer,
	})
}

// s3Step is what the fake S3 does with one request.
type s3Step int

const (
	s3Apply         s3Step = iota // applies the request, answers
	s3SlowDown                    // 503 SlowDown: nothing applied
	s3ApplyAndStall               // applies the request, never answers
)

// fakeS3 serves, path-style, PUT and GET of objects and the completion
// (POST ?uploadId=) of one open multipart upload, "u1". The n-th request
// gets steps[n-1]; requests past the last step get the last.
type fakeS3 struct {
	effects
	steps []s3Step

	mu         sync.Mutex
	objects    map[string][]byte
	stores     [][]byte // the body of each PUT applied, in order
	uploadDone bool
}

func newFakeS3(t *testing.T, steps ...s3Step) (*fakeS3, string) {
	t.Helper()
	f := &fakeS3{steps: steps, objects: map[string][]byte{}}
	return f, newServer(t, f.serve).URL
}

func (f *fakeS3) serve(w http.ResponseWriter, r *http.Request) {
	n, _ := f.record(r)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	step := f.steps[min(n, len(f.steps))-1]
	if step == s3SlowDown {
		s3Error(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
		return
	}
	f.mu.Lock()
	var answer func()
	switch {
	case r.Method == http.MethodPut:
		f.objects[r.URL.Path] = body
		f.stores = append(f.stores, body)
		f.apply("", nil)
		answer = func() { w.Header().Set("ETag", fmt.Sprintf(`"etag-%d"`, n)) }
	case r.Method == http.MethodGet:
		b, ok := f.objects[r.URL.Path]
		answer = func() {
			if !ok {
				s3Error(w, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
				return
			}
			_, _ = w.Write(b)
		}
	case r.Method == http.MethodPost && r.URL.Query().Get("uploadId") == "u1" && !f.uploadDone:
		f.uploadDone = true
		f.objects[r.URL.Path] = []byte("assembled")
		f.apply("", nil)
		answer = func() {
			w.Header().Set("Content-Type", "application/xml")
			_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`+
				`<Bucket>bucket</Bucket><Key>big</Key><ETag>"etag-%d"</ETag></CompleteMultipartUploadResult>`, n)
		}
	case r.Method == http.MethodPost && r.URL.Query().Has("uploadId"):
		answer = func() { s3Error(w, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.") }
	default:
		answer = func() { s3Error(w, http.StatusNotImplemented, "NotImplemented", "not faked") }
	}
	f.mu.Unlock()
	if step == s3ApplyAndStall {
		stall(r)
		return
	}
	answer()
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message><RequestId>fake</RequestId></Error>`, code, msg)
}

// Stores returns the body of each PUT the server applied.
func (f *fakeS3) Stores() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.stores...)
}

// sdkAttempts returns the attempt each request carried in the SDK's
// amz-sdk-request header ("attempt=2; max=3" gives "attempt=2").
func sdkAttempts(fx *effects) []string {
	var out []string
	for _, s := range fx.Seen() {
		a, _, _ := strings.Cut(s.Header.Get("Amz-Sdk-Request"), ";")
		out = append(out, a)
	}
	return out
}

func putObject(ctx context.Context, c *s3.Client, body []byte) error {
	_, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("bucket"), Key: aws.String("report.csv"), Body: bytes.NewReader(body),
	})
	return err
}

func completeUpload(ctx context.Context, c *s3.Client) error {
	_, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String("bucket"), Key: aws.String("big"), UploadId: aws.String("u1"),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
			{ETag: aws.String(`"etag-part-1"`), PartNumber: aws.Int32(1)},
		}},
	})
	return err
}

// The recipe: a PutObject answered 503 and then 200 is repeated by the SDK
// alone — two requests, the SDK's attempts 1 and 2 — and the object is
// written once.
func TestS3PutObjectRepeatedBySDKAlone(t *testing.T) {
	f, base := newFakeS3(t, s3SlowDown, s3Apply)
	c := s3Client(base, recipeTransport(t), s3Retryer(checkFirst))

	require.NoError(t, putObject(t.Context(), c, []byte("a,b\n1,2\n")))
	assert.Equal(t, 2, f.Requests(), "requests at S3")
	assert.Equal(t, []string{"attempt=1", "attempt=2"}, sdkAttempts(&f.effects))
	assert.Equal(t, [][]byte{[]byte("a,b\n1,2\n")}, f.Stores(), "the object is written once")
}

// A dependency that keeps failing with 503. With the recipe, the requests
// are the SDK's three attempts. With retryfuse's default three attempts
// under the SDK's three, a GetObject is sent nine times; a PutObject only
// three, because smithy gives the request no GetBody and retryfuse does not
// repeat a body it cannot replay — the multiplication hits bodiless calls.
func TestS3RetriesOnTopMultiply(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   func(t *testing.T) *retryfuse.Transport
		call func(context.Context, *s3.Client) error
		want int
	}{
		{"recipe, GetObject", recipeTransport, getObject, 3},
		{"retryfuse's 3 attempts on top, GetObject", defaultTransport, getObject, 9},
		{"recipe, PutObject", recipeTransport, putSmall, 3},
		{"retryfuse's 3 attempts on top, PutObject", defaultTransport, putSmall, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, base := newFakeS3(t, s3SlowDown)
			c := s3Client(base, tc.tr(t), s3Retryer(checkFirst))
			err := tc.call(t.Context(), c)
			var apiErr smithy.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, "SlowDown", apiErr.ErrorCode())
			assert.Equal(t, tc.want, f.Requests(), "requests at S3: %q", sdkAttempts(&f.effects))
			assert.Zero(t, f.Applied())
		})
	}
}

func defaultTransport(t *testing.T) *retryfuse.Transport { return fast(t, &retryfuse.Transport{}) }

func getObject(ctx context.Context, c *s3.Client) error {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String("report.csv")})
	if err == nil {
		out.Body.Close()
	}
	return err
}

func putSmall(ctx context.Context, c *s3.Client) error { return putObject(ctx, c, []byte("x")) }

// The recipe, for a PUT: S3 stores the object and the response is lost
// (the attempt times out). A PUT is idempotent by method, so retryfuse's
// decision core does not make it a reconcile error: an uncertain PUT may
// be repeated. With MaxAttempts 1 retryfuse returns a *RetryError
// (ErrAttemptsExhausted, wrapping the attempt timeout) and the SDK, which
// owns the retries, sends the PUT again: two stores of the same bytes,
// leaving the object as one store would. This is the intended behaviour,
// pinned here; the no-replay case needs a write that is not idempotent,
// below.
func TestS3PutObjectLostResponseIsRepeatedBySDK(t *testing.T) {
	f, base := newFakeS3(t, s3ApplyAndStall, s3Apply)
	c := s3Client(base, recipeTransport(t), s3Retryer(checkFirst))

	body := []byte("a,b\n1,2\n")
	require.NoError(t, putObject(t.Context(), c, body))
	assert.Equal(t, []string{"attempt=1", "attempt=2"}, sdkAttempts(&f.effects), "the SDK's attempts, one request each")
	assert.Equal(t, [][]byte{body, body}, f.Stores(), "the PUT is stored twice, with the same bytes")
}

// CompleteMultipartUpload is a POST. S3 completes the upload and the
// response is lost (the attempt times out): retryfuse returns a
// *ReconcileRequiredError. With the recipe's check first in the
// retryables, the SDK does not send it again: one request, the upload
// completed once, and the caller gets the reconcile error. Without the
// check, or with it appended after the defaults, the SDK replays the POST,
// and the replay's answer, 404 NoSuchUpload, is what the caller gets for an
// upload that was completed.
func TestS3CompleteMultipartUploadLostResponse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		at       checkAt
		requests int
	}{
		{"recipe, check first", checkFirst, 1},
		{"no check", noCheck, 2},
		{"check appended after the defaults", checkAppend, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, base := newFakeS3(t, s3ApplyAndStall, s3Apply)
			c := s3Client(base, recipeTransport(t), s3Retryer(tc.at))

			err := completeUpload(t.Context(), c)
			require.Error(t, err)
			assert.Equal(t, tc.requests, f.Requests(), "requests at S3")
			assert.Equal(t, 1, f.Applied(), "the upload is completed once")

			var rec *retryfuse.ReconcileRequiredError
			var apiErr smithy.APIError // CompleteMultipartUpload does not model NoSuchUpload: a *smithy.GenericAPIError
			if tc.at == checkFirst {
				require.ErrorAs(t, err, &rec)
				assert.Equal(t, http.MethodPost, rec.Method)
				var opErr *smithy.OperationError
				assert.ErrorAs(t, err, &opErr, "wrapped by the SDK's operation error")
				assert.False(t, errors.As(err, &apiErr), "no answer from S3")
			} else {
				assert.False(t, errors.As(err, &rec), "the replay's answer replaces the reconcile error")
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, "NoSuchUpload", apiErr.ErrorCode(), "the caller is told the upload does not exist")
			}
		})
	}
}

// Without AttemptTimeout the lost response ends at the caller's deadline.
// Nothing is replayed (the context is done), but smithy replaces the
// error with a *smithy.CanceledError and the reconcile error is lost:
// pinned here, so that the recipe's AttemptTimeout has its reason.
func TestS3CallerDeadlineDropsReconcileError(t *testing.T) {
	f, base := newFakeS3(t, s3ApplyAndStall)
	c := s3Client(base, fast(t, &retryfuse.Transport{Retry: retryfuse.RetryPolicy{MaxAttempts: 1}}), s3Retryer(checkFirst))

	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	err := completeUpload(ctx, c)
	require.Error(t, err)
	var canceled *smithy.CanceledError
	assert.ErrorAs(t, err, &canceled)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var rec *retryfuse.ReconcileRequiredError
	assert.False(t, errors.As(err, &rec), "smithy dropped the reconcile error")
	assert.Equal(t, 1, f.Requests(), "requests at S3")
	assert.Equal(t, 1, f.Applied())
}
