/// The version `containerfs --version` prints. The one place it is written: `make deb`
/// reads it from this line for the package's name and control data.
let containerfsVersion = "0.1.0"
