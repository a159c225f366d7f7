// Command-line flags: `--name value`, `--name=value`, or a bare `--switch`. A command reads each
// flag it knows once, with its fallback, a one-line description and the values it accepts; that
// one declaration gives the value, the validation and the `mlaserve COMMAND --help` line.
// Finish() then reports every unknown flag, bad value and refused flag at once, or the help.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mlaserve::cli {

// What --help shows about a flag besides its description, and which given values are accepted.
// Bounds and choices check only values the user gave, never the fallback (which may be a
// sentinel such as 0 for "the model's default").
struct FlagSpec {
  const char* value_name = nullptr;     // --help: `--model-path DIR`; by default INT, FLOAT, TEXT
  const char* shown_default = nullptr;  // --help: the default in words, instead of the fallback
  std::optional<double> min;            // a given value must be >= min
  std::optional<double> above;          // ... > above
  std::optional<double> max;            // ... <= max
  std::vector<std::string> choices;     // a given value must be one of these
};

class Args {
 public:
  // argv holds the flags after the command name; `--help` or `-h` anywhere asks for the help.
  Args(std::string command, std::string summary, int argc, char** argv);

  std::string Str(const std::string& name, const std::string& fallback, const char* help, const FlagSpec& spec = {});
  std::optional<std::string> OptStr(const std::string& name, const char* help, const FlagSpec& spec = {});
  int Int(const std::string& name, int fallback, const char* help, const FlagSpec& spec = {});
  std::optional<int> OptInt(const std::string& name, const char* help, const FlagSpec& spec = {});
  int64_t Int64(const std::string& name, int64_t fallback, const char* help, const FlagSpec& spec = {});
  double Double(const std::string& name, double fallback, const char* help, const FlagSpec& spec = {});
  bool Switch(const std::string& name, const char* help);  // present without a value
  // Every value given for a repeatable flag, in order.
  std::vector<std::string> All(const std::string& name, const char* help, const FlagSpec& spec = {});

  // Whether the command line gave `name` (for flags that only mean something with others).
  bool WasGiven(const std::string& name) const;

  // A flag SGLang has and mlaserve refuses: listed in --help; given, it is an error naming `why`.
  void Refuse(const std::string& name, const std::string& why);
  // An error found by the command before Finish() (a value out of what another flag allows):
  // reported together with the others.
  void Reject(std::string message);

  // Call after reading every flag. nullopt: run the command. Otherwise the command returns this
  // exit code at once: 0 after printing the help to stdout, 2 after printing every error to
  // stderr, one line each ("mlaserve COMMAND: ...").
  [[nodiscard]] std::optional<int> Finish();

  const std::string& command() const { return command_; }

 private:
  struct Given {
    std::string name;
    std::optional<std::string> value;  // nullopt: a bare --name
  };
  struct HelpLine {
    std::string flag;  // "--page-size INT"
    std::string text;  // description, default and accepted values
  };

  // Marks `name` known and records its help line (the first declaration wins).
  void Declare(const std::string& name, const std::string& value_name, const std::string& help, const FlagSpec& spec,
               const std::string& default_text);
  // Declares `name`; returns the last value given, if any, after checking it against the choices.
  std::optional<std::string> Read(const std::string& name, const char* help, const FlagSpec& spec,
                                  const char* type_name, const std::string& fallback_text);
  std::optional<int64_t> ReadInteger(const std::string& name, const char* help, const FlagSpec& spec,
                                     const std::string& fallback_text, int64_t lo, int64_t hi);
  // Records an error when a given number is outside spec's bounds; true when it is inside.
  bool CheckBounds(const std::string& name, const std::string& text, double value, const FlagSpec& spec);

  std::string command_;
  std::string summary_;
  bool help_ = false;
  std::vector<Given> given_;
  std::vector<std::string> known_;
  std::vector<HelpLine> help_lines_;
  std::vector<std::string> errors_;
};

// Prints "mlaserve COMMAND: MESSAGE" to stderr and returns `code`.
int Fail(const std::string& command, const std::string& message, int code = 1);

}  // namespace mlaserve::cli
