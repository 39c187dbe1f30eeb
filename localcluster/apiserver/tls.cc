#include "localcluster/apiserver/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"

namespace cohort::local {

absl::StatusOr<Certificate> MakeSelfSignedCertificate(const std::vector<std::string>& addresses) {
  Certificate c;
  c.key = EVP_EC_gen("P-256");
  c.cert = X509_new();
  if (c.key == nullptr || c.cert == nullptr)
    return absl::InternalError("OpenSSL could not make a key");
  X509_set_version(c.cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c.cert), static_cast<long>(time(nullptr)));
  X509_gmtime_adj(X509_getm_notBefore(c.cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.cert), 3600L * 24 * 365);
  X509_set_pubkey(c.cert, c.key);
  X509_NAME* name = X509_get_subject_name(c.cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("cohort-local-cluster"), -1, -1,
                             0);
  X509_set_issuer_name(c.cert, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, c.cert, c.cert, nullptr, nullptr, 0);
  std::string names = "IP:127.0.0.1,DNS:localhost";
  for (const std::string& a : addresses) absl::StrAppend(&names, ",IP:", a);
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                            std::pair{NID_key_usage, "critical,digitalSignature,keyCertSign"},
                            std::pair{NID_subject_alt_name, names.c_str()}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext == nullptr) return absl::InternalError("OpenSSL could not add a certificate extension");
    X509_add_ext(c.cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(c.cert, c.key, EVP_sha256()) == 0)
    return absl::InternalError("OpenSSL could not sign");
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, c.cert);
  char* data = nullptr;
  long length = BIO_get_mem_data(bio, &data);
  c.pem.assign(data, length);
  BIO_free(bio);
  return c;
}

}  // namespace cohort::local
