package deploy

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"
)

// cert-manager's Go module is not available here, so its Certificate is
// decoded into the part of its schema Ferry's manifests use, as strictly
// as the API types: an unknown or misspelt field is an error.

const certificateAPIVersion = "cert-manager.io/v1"

// Certificate is a cert-manager.io/v1 Certificate, the fields Ferry's
// manifests set.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec is the part of a Certificate's spec Ferry uses.
type CertificateSpec struct {
	SecretName  string                 `json:"secretName"`
	IssuerRef   IssuerRef              `json:"issuerRef"`
	URIs        []string               `json:"uris,omitempty"`
	DNSNames    []string               `json:"dnsNames,omitempty"`
	Usages      []string               `json:"usages,omitempty"`
	PrivateKey  *CertificatePrivateKey `json:"privateKey,omitempty"`
	Duration    *metav1.Duration       `json:"duration,omitempty"`
	RenewBefore *metav1.Duration       `json:"renewBefore,omitempty"`
}

// IssuerRef names the issuer that signs a Certificate.
type IssuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// CertificatePrivateKey is how cert-manager makes the key.
type CertificatePrivateKey struct {
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
	RotationPolicy string `json:"rotationPolicy,omitempty"`
}

// GetObjectKind and DeepCopyObject make a Certificate a runtime.Object,
// so Render returns it with the API types.
func (c *Certificate) GetObjectKind() schema.ObjectKind { return &c.TypeMeta }

// DeepCopyObject copies the Certificate and everything it points to.
func (c *Certificate) DeepCopyObject() runtime.Object {
	out := *c
	out.ObjectMeta = *c.ObjectMeta.DeepCopy()
	out.Spec.URIs = append([]string(nil), c.Spec.URIs...)
	out.Spec.DNSNames = append([]string(nil), c.Spec.DNSNames...)
	out.Spec.Usages = append([]string(nil), c.Spec.Usages...)
	if c.Spec.PrivateKey != nil {
		pk := *c.Spec.PrivateKey
		out.Spec.PrivateKey = &pk
	}
	if c.Spec.Duration != nil {
		d := *c.Spec.Duration
		out.Spec.Duration = &d
	}
	if c.Spec.RenewBefore != nil {
		d := *c.Spec.RenewBefore
		out.Spec.RenewBefore = &d
	}
	return &out
}

func decodeCertificate(data []byte) (*Certificate, error) {
	var c Certificate
	if err := jsonUnmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("Certificate: %w", err)
	}
	return &c, nil
}

// jsonUnmarshal decodes as the API server does: field names case
// sensitive, unknown and duplicate fields refused.
func jsonUnmarshal(data []byte, v any) error {
	strict, err := kjson.UnmarshalStrict(data, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
