// Typed access to JSON object fields with xstage-style messages, so every loader reports
// "<where>: field \"x\": <problem>" instead of nlohmann's generic type errors.
#pragma once
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "xstage/error.hpp"

namespace xstage::detail {

inline void require_object(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object())
    throw Error(format_error(where, std::string("expected a JSON object, got ") + j.type_name()));
}

// Converts one JSON value to T, or throws naming the field.
template <class T>
T convert_field(const nlohmann::json& v, const char* key, const std::string& where) {
  auto fail = [&](const std::string& what) -> T {
    throw Error(format_error(where, std::string("field \"") + key + "\": " + what));
  };
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return fail(std::string("expected a string, got ") + v.type_name());
    return v.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return fail(std::string("expected true/false, got ") + v.type_name());
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    // Accept 16384 and 16384.0, reject 16384.5 and values that do not fit T.
    if (!v.is_number()) return fail(std::string("expected an integer, got ") + v.type_name());
    if (v.is_number_unsigned() &&
        v.get<unsigned long long>() > static_cast<unsigned long long>(std::numeric_limits<T>::max()))
      return fail("integer " + v.dump() + " is out of range");
    if (v.is_number_integer()) {
      const long long x = v.get<long long>();
      if (x < static_cast<long long>(std::numeric_limits<T>::min()) ||
          x > static_cast<long long>(std::numeric_limits<T>::max()))
        return fail("integer " + std::to_string(x) + " is out of range");
      return static_cast<T>(x);
    }
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) ||
        d < static_cast<double>(std::numeric_limits<T>::min()) ||
        d > static_cast<double>(std::numeric_limits<T>::max()))
      return fail("expected an integer, got " + v.dump());
    return static_cast<T>(d);
  } else {
    static_assert(std::is_floating_point_v<T>);
    if (!v.is_number()) return fail(std::string("expected a number, got ") + v.type_name());
    return v.get<T>();
  }
}

template <class T>
T required_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw Error(format_error(where, std::string("missing field \"") + key + "\""));
  return convert_field<T>(*it, key, where);
}

template <class T>
T optional_field(const nlohmann::json& j, const char* key, T fallback, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return convert_field<T>(*it, key, where);
}

}  // namespace xstage::detail
