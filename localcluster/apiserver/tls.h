#pragma once

// The local API server's TLS: one self-signed certificate for 127.0.0.1, localhost and any further
// addresses, that is its own CA (the kubeconfig carries it).

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cohort::local {

// The caller frees `cert` (X509_free) and `key` (EVP_PKEY_free); `pem` is the certificate.
struct Certificate {
  X509* cert = nullptr;
  EVP_PKEY* key = nullptr;
  std::string pem;
};

// Internal when OpenSSL cannot make one.
absl::StatusOr<Certificate> MakeSelfSignedCertificate(const std::vector<std::string>& addresses);

}  // namespace cohort::local
