// The resolved config as YAML (RUN_DIR/config.yaml): every key of the schema, in schema order,
// so that load_config reads it back to an equal Config.
#include <sstream>

#include "launch/config.h"
#include "launch/config_schema.h"

namespace tetra::launch {

std::string to_yaml(const Config& cfg) {
  std::ostringstream os;
  os << "# tetra experiment config, resolved: every key with its value, defaults included.\n";
  std::string section;
  for (const schema::Field& f : schema::fields()) {
    if (section != f.section) {
      section = f.section;
      os << (os.tellp() > 0 ? "\n" : "") << section << ":\n";
    }
    os << "  " << f.key << ": " << schema::value_text(f, cfg) << "\n";
  }
  return os.str();
}

}  // namespace tetra::launch
