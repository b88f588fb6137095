import ContainerStore

/// The report as people, scripts and CI systems read it.
extension CheckReport {
    /// A short table: one line per rule, then the files of each rule that did not pass.
    public var table: String {
        var out = "containerfs check \(store)\n"
        for result in results {
            let mark =
                switch result.outcome {
                case .pass: "pass"
                case .warning: "WARN"
                case .failure: "FAIL"
                case .skipped: "skip"
                }
            out += "  \(mark)  \(result.rule.rawValue.padding(18))  \(result.summary)\n"
            guard result.outcome == .warning || result.outcome == .failure else { continue }
            for finding in result.findings {
                let size =
                    finding.bytes.map { humanBytes($0) }.map { $0.padding(10, right: true) + "  " } ?? String(repeating: " ", count: 12)
                out += "          \(size)\(finding.path)  (\(finding.note))\n"
            }
            if result.findingCount > result.findings.count {
                out += "          … and \(result.findingCount - result.findings.count) more\n"
            }
            out += "          hint: \(result.rule.hint)\n"
        }
        let counts = CheckOutcome.allOutcomes.map { outcome in "\(results.count { $0.outcome == outcome }) \(outcome.rawValue)" }
        out += "\(failed ? "FAILED" : "passed"): \(counts.joined(separator: ", "))\n"
        return out
    }

    /// One JSON object: the store, `failed`, and each rule with its outcome and files.
    public var json: String {
        let rules = results.map { result in
            let findings = result.findings.map { finding in
                "{\"path\":\(jsonString(finding.path)),\"bytes\":\(finding.bytes.map(String.init) ?? "null"),\"note\":\(jsonString(finding.note))}"
            }
            return
                "{\"rule\":\(jsonString(result.rule.rawValue)),\"title\":\(jsonString(result.rule.title)),\"outcome\":\(jsonString(result.outcome.rawValue)),"
                + "\"summary\":\(jsonString(result.summary)),\"hint\":\(jsonString(result.rule.hint)),\"findingCount\":\(result.findingCount),"
                + "\"findings\":[\(findings.joined(separator: ","))]}"
        }
        return "{\"store\":\(jsonString(store)),\"failed\":\(failed),\"rules\":[\(rules.joined(separator: ","))]}\n"
    }

    /// JUnit XML as Jenkins, GitLab and GitHub Actions' reporters read it (Jenkins'
    /// junit-10.xsd): one test case per rule; a failing rule's `<failure>` carries its
    /// files, a warning's files go to `<system-out>`, a rule that could not be checked is `<skipped>`.
    public func junit(timestamp: String, hostname: String) -> String {
        let failures = results.count { $0.outcome == .failure }
        let skipped = results.count { $0.outcome == .skipped }
        var out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        out += "<testsuites name=\"containerfs check\" tests=\"\(results.count)\" failures=\"\(failures)\" errors=\"0\" time=\"0\">\n"
        out +=
            "  <testsuite name=\(xmlAttribute("containerfs check " + store)) tests=\"\(results.count)\" failures=\"\(failures)\" errors=\"0\" "
            + "skipped=\"\(skipped)\" time=\"0\" timestamp=\(xmlAttribute(timestamp)) hostname=\(xmlAttribute(hostname))>\n"
        for result in results {
            out +=
                "    <testcase classname=\"containerfs.check\" name=\(xmlAttribute("\(result.rule.rawValue): \(result.rule.title)")) time=\"0\""
            let details =
                (result.findings.map { finding in
                    (finding.bytes.map { humanBytes($0) + "  " } ?? "") + finding.path + "  (" + finding.note + ")"
                } + (result.findingCount > result.findings.count ? ["… and \(result.findingCount - result.findings.count) more"] : [])
                + ["hint: " + result.rule.hint]).joined(separator: "\n")
            switch result.outcome {
            case .pass:
                out += ">\n      <system-out>\(xmlText(result.summary))</system-out>\n    </testcase>\n"
            case .skipped:
                out += ">\n      <skipped message=\(xmlAttribute(result.summary))/>\n    </testcase>\n"
            case .warning:
                out += ">\n      <system-out>\(xmlText("warning: " + result.summary + "\n" + details))</system-out>\n    </testcase>\n"
            case .failure:
                out +=
                    ">\n      <failure type=\(xmlAttribute(result.rule.rawValue)) message=\(xmlAttribute(result.summary))>\(xmlText(details))</failure>\n    </testcase>\n"
            }
        }
        out += "  </testsuite>\n</testsuites>\n"
        return out
    }
}

extension CheckOutcome {
    /// Every outcome, in the order the summary line counts them.
    static let allOutcomes: [CheckOutcome] = [.pass, .warning, .failure, .skipped]
}

/// `text` as XML character data. Characters XML 1.0 cannot hold at all (most C0
/// controls, U+FFFE, U+FFFF) become `\xNN`/`\u{NNNN}`, as the audit log prints them.
func xmlText(_ text: String) -> String {
    var out = ""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "&": out += "&amp;"
        case "<": out += "&lt;"
        case ">": out += "&gt;"
        case "\"": out += "&quot;"
        case "'": out += "&apos;"
        case "\n", "\t": out.unicodeScalars.append(scalar)
        default:
            if scalar.value < 0x20 {
                let hex = String(scalar.value, radix: 16)
                out += "\\x" + (hex.count < 2 ? "0" : "") + hex
            } else if scalar.value == 0xFFFE || scalar.value == 0xFFFF {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out
}

/// `text` as a quoted XML attribute value (a line break kept as `&#10;`).
func xmlAttribute(_ text: String) -> String {
    "\"" + xmlText(text).replacingNewlines() + "\""
}

extension String {
    fileprivate func replacingNewlines() -> String {
        var out = ""
        for character in self { out += character == "\n" ? "&#10;" : character == "\t" ? "&#9;" : String(character) }
        return out
    }

    fileprivate func padding(_ width: Int, right: Bool = false) -> String {
        let fill = String(repeating: " ", count: max(0, width - count))
        return right ? fill + self : self + fill
    }
}
