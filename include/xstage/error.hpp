// One error type for the whole library: every failure carries what was being done.
#pragma once
#include <stdexcept>
#include <string>

namespace xstage {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown for bad user input (shapes, flags, environment): the CLI prints it as one line
// and exits with status 2.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(what) {}
};

// Formats "<context>: <detail>" (the shape every message in xstage has).
std::string format_error(const std::string& context, const std::string& detail);

}  // namespace xstage
