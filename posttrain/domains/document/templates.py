"""The report templates: what a generated document is about, as vocabulary (no logic here).

A template names its groups (divisions, audited processes, subsystems, treatment arms: one table
per (metric, group) pair), its entities (the table rows: regions, sites, deployment profiles),
its columns (years, quarters, releases, visits), its metrics with their units and precision, a
few named facts (text answers) and filler sentences. `{company}`, `{group}`, `{entity}` (a bare
name), `{where}` (the entity phrase), `{col}`, `{n}` and `{sec}` in filler are filled by the generator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str  # "revenue": used in sentences, captions and questions
    unit: str  # how the question names the unit: "USD million"
    prefix: str  # written before the figure in sentences: "USD "
    suffix: str  # written after it: " million", "%", " ms"
    low: float  # base value range
    high: float
    decimals: int  # 0: an integer count


@dataclass(frozen=True)
class Named:
    role: str  # "chief financial officer"
    question: str  # "Who is {company}'s chief financial officer?"
    sentence: str  # "{name} serves as chief financial officer ..."
    pool: tuple[str, ...]


@dataclass(frozen=True)
class Template:
    kind: str  # "annual report"
    title: str  # "{company} Annual Report {year}"
    subjects: tuple[str, ...]  # the company / system / study names
    group_label: str  # "division": "the Enterprise division"
    group_phrase: str  # "the {g} division"
    groups: tuple[str, ...]
    entity_kind: str  # "region": the row header
    entity_phrase: str  # "in {e}"
    entities: tuple[str, ...]
    col_labels: tuple[str, ...]  # formats of a column label, "{y}" the year: "FY{y}"
    col_phrase: str  # "in {c}"
    metrics: tuple[Metric, ...]
    named: tuple[Named, ...]
    intro_chapter: str
    closing_chapters: tuple[str, ...]
    aspects: tuple[str, ...]  # narrative section titles within a group's chapter
    boiler_titles: tuple[str, ...]
    filler: tuple[str, ...]
    reasons: tuple[str, ...]  # why a figure was restated
    years: tuple[int, int] = (2016, 2031)  # the report's year ({year}, {y}) is drawn from this range


PERSONS = ("Amara Okafor", "Lena Hoffmann", "Rafael Quintero", "Mei Tanaka", "Jonas Lindqvist", "Priya Raman",
           "Tomasz Wieczorek", "Claire Dubois", "Samuel Achebe", "Ingrid Solberg", "Kenji Watanabe", "Lucia Ferraro",
           "Omar Haddad", "Hannah Brooks", "Viktor Petrov", "Aisha Mensah", "Diego Alvarez", "Noor Siddiqui")
FIRMS = ("Halvorsen & Reed LLP", "Marlowe Audit Partners", "Castellan Assurance", "Brightwater & Co.",
         "Oakridge Advisory", "Veridian Accountants", "Northgate Partners", "Kestrel Assurance Group")
CITIES = ("Rotterdam", "Montreal", "Osaka", "Melbourne", "Lyon", "Porto", "Gdansk", "Tampere", "Leeds", "Bilbao",
          "Curitiba", "Pune", "Busan", "Graz")
COMMON_FILLER = (
    "This section should be read together with Section {sec}.",
    "Figures are presented on a consistent basis unless stated otherwise.",
    "Comparative information is provided where it aids understanding.",
    "Definitions of the terms used here are given in Section {sec}.",
    "The committee met {n} times during the period under review.",
    "Management reviewed the underlying assumptions and found them reasonable.",
    "No events after the reporting date require adjustment of the figures presented.",
    "Where amounts do not add up, this is due to rounding.",
)

ANNUAL = Template(
    kind="annual report", title="{company} Annual Report FY{year}",
    subjects=("Aldercrest Holdings", "Brightfield Industries", "Corvane Group", "Duskwater plc", "Elmstone Systems",
              "Fernhollow Corporation", "Galewind Energy", "Harrowgate Foods", "Ironvale Mining", "Juniper Reach Inc.",
              "Kingsmere Logistics", "Lumenport Technologies"),
    group_label="division", group_phrase="the {g} division",
    groups=("Consumer", "Enterprise", "Industrial", "Logistics", "Healthcare", "Energy", "Retail", "Media",
            "Agriculture", "Mobility", "Security", "Materials"),
    entity_kind="Region", entity_phrase="in {e}",
    entities=("North America", "Latin America", "Western Europe", "Central Europe", "the Middle East", "Africa",
              "South Asia", "East Asia", "Oceania", "the Nordics"),
    col_labels=("FY{y}",), col_phrase="in {c}",
    metrics=(Metric("revenue", "USD million", "USD ", " million", 80, 2400, 1),
             Metric("operating profit", "USD million", "USD ", " million", 5, 420, 1),
             Metric("headcount", "employees", "", " employees", 120, 9000, 0),
             Metric("capital expenditure", "USD million", "USD ", " million", 2, 260, 1),
             Metric("active customers", "thousand customers", "", " thousand customers", 3, 900, 1),
             Metric("energy consumption", "GWh", "", " GWh", 1, 480, 1)),
    named=(Named("chief financial officer", "Who is {company}'s chief financial officer?",
                 "{name} serves as chief financial officer and signs the financial statements.", PERSONS),
           Named("external auditor", "Which firm audited {company}'s financial statements?",
                 "The financial statements were audited by {name}.", FIRMS),
           Named("headquarters", "In which city is {company} headquartered?",
                 "The group's registered headquarters are located in {name}.", CITIES)),
    intro_chapter="Overview", closing_chapters=("Governance", "Risk management", "Notes to the accounts"),
    aspects=("performance review", "operations", "market conditions", "outlook", "investment programme",
             "people and organisation", "customers and products", "cost management"),
    boiler_titles=("Board of directors", "Remuneration", "Internal control", "Principal risks", "Accounting policies",
                   "Taxation", "Related parties", "Pensions", "Leases", "Financial instruments", "Share capital",
                   "Subsequent events"),
    filler=COMMON_FILLER + (
        "{company} continued to invest in its core markets during {col}.",
        "Demand {where} remained uneven across the year.",
        "The {group} division completed {n} product launches in the period.",
        "Pricing actions offset part of the input cost inflation.",
        "The board proposes a dividend in line with the stated policy.",
        "Working capital discipline improved cash conversion.",
        "Currency movements reduced reported growth compared with constant-currency figures.",
        "The integration of acquired businesses proceeded according to plan."),
    reasons=("a review of revenue recognition on multi-year contracts", "the reclassification of a disposed business",
             "the correction of an intercompany elimination error", "the adoption of a revised leasing standard"),
)

AUDIT = Template(
    kind="internal audit report", title="{company} Internal Audit Report {year}",
    subjects=("Marrowfield Utilities", "Quillon Shipping", "Redcliff Pharmaceuticals", "Sablewood Insurance",
              "Thornbury Retail", "Umberlake Telecom", "Westmarch Bank", "Yarrowdale Chemicals"),
    group_label="process", group_phrase="the {g} process",
    groups=("procure-to-pay", "order-to-cash", "payroll", "treasury", "inventory", "fixed assets",
            "IT access control", "tax compliance", "accounts payable", "travel and expenses", "contract management",
            "vendor onboarding"),
    entity_kind="Site", entity_phrase="at the {e} site",
    entities=("Antwerp", "Birmingham", "Cologne", "Dublin", "Eindhoven", "Fresno", "Gothenburg", "Hamburg", "Izmir",
              "Jacksonville"),
    col_labels=("Q1 {y}", "Q2 {y}", "Q3 {y}", "Q4 {y}"), col_phrase="in {c}",
    metrics=(Metric("sampled transactions", "transactions", "", " transactions", 40, 2600, 0),
             Metric("control exceptions", "exceptions", "", " exceptions", 1, 140, 0),
             Metric("exception rate", "percent", "", "%", 0.2, 14, 2),
             Metric("audit adjustments", "EUR thousand", "EUR ", " thousand", 4, 1800, 1),
             Metric("open findings", "findings", "", " findings", 1, 60, 0),
             Metric("average remediation time", "days", "", " days", 3, 120, 1)),
    named=(Named("chief audit executive", "Who is the chief audit executive responsible for the {company} report?",
                 "The engagement was directed by {name}, chief audit executive.", PERSONS),
           Named("co-sourcing partner", "Which firm acted as co-sourcing partner for the audit of {company}?",
                 "Fieldwork was co-sourced with {name}.", FIRMS),
           Named("audit committee location", "In which city did {company}'s audit committee meet to approve the plan?",
                 "The audit committee approved the plan at its meeting in {name}.", CITIES)),
    intro_chapter="Executive summary", closing_chapters=("Methodology", "Management responses", "Appendices"),
    aspects=("scope and approach", "key observations", "control design", "operating effectiveness",
             "root causes", "remediation status", "data analytics", "follow-up testing"),
    boiler_titles=("Audit charter", "Independence", "Sampling methodology", "Rating scale", "Limitations",
                   "Distribution list", "Glossary", "Prior-year findings", "Fraud risk assessment",
                   "Quality assurance", "Resourcing", "Acknowledgements"),
    filler=COMMON_FILLER + (
        "Testing at the {entity} site followed the standard sampling approach.",
        "Process owners for {group} were interviewed before fieldwork began.",
        "Walkthroughs confirmed the documented process in most respects.",
        "Evidence was retained in the audit management system.",
        "{n} recommendations were agreed with management.",
        "Segregation of duties was reviewed for all privileged roles.",
        "Exceptions were discussed with the control owners before rating.",
        "The audit plan was risk-based and approved in advance."),
    reasons=("a re-performance of the sample after duplicate records were found",
             "late evidence supplied by the site", "a change in the exception definition agreed with management",
             "a data extraction error corrected during follow-up testing"),
)

SPEC = Template(
    kind="technical specification", title="{company} Platform Specification v{year}",
    subjects=("Nimbus Relay", "Orion Datastore", "Pioneer Stream", "Quasar Mesh", "Rivet Scheduler",
              "Sextant Gateway", "Tundra Cache", "Vector Ledger"),
    group_label="subsystem", group_phrase="the {g} subsystem",
    groups=("ingest", "storage", "query", "replication", "scheduler", "authentication", "telemetry", "cache",
            "compaction", "routing", "billing", "export"),
    entity_kind="Profile", entity_phrase="on the {e} profile",
    entities=("edge", "micro", "small", "standard", "large", "xlarge", "burst", "archive", "gpu", "hpc"),
    col_labels=("v{y}.0", "v{y}.1", "v{y}.2", "v{y}.3"), col_phrase="in release {c}",
    metrics=(Metric("p99 latency", "milliseconds", "", " ms", 0.8, 240, 1),
             Metric("throughput", "requests per second", "", " requests per second", 300, 90000, 0),
             Metric("memory footprint", "MiB", "", " MiB", 64, 16000, 0),
             Metric("power draw", "watts", "", " W", 4, 900, 1),
             Metric("error rate", "percent", "", "%", 0.01, 3, 2),
             Metric("cold start time", "seconds", "", " s", 0.05, 40, 2)),
    named=(Named("reference implementation language",
                 "In which language is the {company} reference implementation written?",
                 "The reference implementation is written in {name}.",
                 ("Rust", "Go", "OCaml", "Zig", "Haskell", "Kotlin", "Elixir", "Ada")),
           Named("specification editor", "Who is the editor of the {company} specification?",
                 "{name} is the editor of this specification.", PERSONS),
           Named("wire format", "Which wire format does {company} use on the internal bus?",
                 "Messages on the internal bus use the {name} wire format.",
                 ("Cap'n Proto", "FlatBuffers", "MessagePack", "CBOR", "Avro", "Protocol Buffers", "Bincode"))),
    intro_chapter="Introduction", closing_chapters=("Conformance", "Security considerations", "Appendices"),
    aspects=("design", "interfaces", "performance targets", "failure modes", "configuration", "capacity planning",
             "observability", "upgrade path"),
    boiler_titles=("Terminology", "Notational conventions", "Versioning", "Compatibility", "Error codes",
                   "Rate limiting", "Logging format", "Threat model", "Deployment topology", "Test vectors",
                   "Change log", "References"),
    filler=COMMON_FILLER + (
        "Implementations MUST reject frames larger than the negotiated maximum.",
        "The {group} subsystem exposes its state through the admin interface.",
        "Benchmarks {where} used the standard load generator.",
        "Timeouts are configurable per tenant.",
        "Clients SHOULD retry idempotent requests with exponential backoff.",
        "{n} configuration keys are reserved for future use.",
        "Backward compatibility is maintained within a major version.",
        "All timestamps are expressed in UTC."),
    reasons=("a re-run of the benchmark with the corrected load generator", "an erratum in the measurement harness",
             "a change to the reference hardware", "the removal of a debug build from the benchmark set"),
    years=(2, 9),
)

TRIAL = Template(
    kind="clinical trial summary", title="{company} Clinical Study Report {year}",
    subjects=("Study ALX-301", "Study BRV-220", "Study CTN-114", "Study DMR-407", "Study EVO-152", "Study FLQ-233",
              "Study GRN-318", "Study HLX-509"),
    group_label="arm", group_phrase="the {g} arm",
    groups=("placebo", "5 mg", "10 mg", "20 mg", "40 mg", "titration", "combination", "open-label",
            "active comparator", "extension", "paediatric", "elderly"),
    entity_kind="Site", entity_phrase="at {e}",
    entities=("Site 101 Lyon", "Site 102 Leeds", "Site 103 Porto", "Site 104 Graz", "Site 105 Pune",
              "Site 106 Busan", "Site 107 Curitiba", "Site 108 Tampere", "Site 109 Osaka", "Site 110 Gdansk"),
    col_labels=("Week 4", "Week 12", "Week 24", "Week 52"), col_phrase="at {c}",
    metrics=(Metric("patients assessed", "patients", "", " patients", 8, 420, 0),
             Metric("adverse events", "events", "", " events", 1, 160, 0),
             Metric("responder rate", "percent", "", "%", 4, 88, 1),
             Metric("mean symptom score change", "points", "", " points", 0.4, 18, 2),
             Metric("discontinuation rate", "percent", "", "%", 0.5, 30, 1),
             Metric("median plasma concentration", "ng/mL", "", " ng/mL", 2, 900, 1)),
    named=(Named("principal investigator", "Who is the coordinating principal investigator of {company}?",
                 "The coordinating principal investigator is {name}.", PERSONS),
           Named("contract research organisation", "Which organisation monitored {company}?",
                 "Monitoring was performed by {name}.", FIRMS),
           Named("coordinating centre", "In which city is the coordinating centre of {company}?",
                 "The coordinating centre is located in {name}.", CITIES)),
    intro_chapter="Synopsis", closing_chapters=("Safety evaluation", "Discussion", "Appendices"),
    aspects=("efficacy results", "safety results", "pharmacokinetics", "patient disposition", "protocol deviations",
             "subgroup analyses", "exposure", "concomitant medication"),
    boiler_titles=("Ethics", "Investigators and administrative structure", "Study design", "Inclusion criteria",
                   "Exclusion criteria", "Randomisation", "Blinding", "Statistical methods", "Data quality assurance",
                   "Sample size", "Changes in the conduct of the study", "List of abbreviations"),
    filler=COMMON_FILLER + (
        "Visits {where} followed the schedule of assessments.",
        "Patients in the {group} arm received study drug once daily.",
        "Protocol deviations were reviewed by the medical monitor.",
        "{n} patients withdrew consent during the period.",
        "Laboratory values were analysed centrally.",
        "Missing data were handled by multiple imputation.",
        "The data monitoring committee recommended continuing the study.",
        "Compliance was assessed by tablet counts at each visit."),
    reasons=("the database lock of the final visit window", "the re-adjudication of events by the endpoint committee",
             "the exclusion of a site after a GCP inspection", "a corrected unblinding log"),
)

TEMPLATES = (ANNUAL, AUDIT, SPEC, TRIAL)
