"""The region table as data: cloud regions and ISO country codes -> provider, grid zone, level.

Each entry names the provider (which sets the PUE), the Electricity Maps zone whose 2022
hourly trace gives the region its time profile, and, for a few regions, a pinned annual
intensity. Regions without a pinned value take the annual mean of their zone's 2022 trace
(``agent/carbon/data/profiles.json``, derived by ``derive_profiles.py``).

Zone choices follow where the provider's data centres sit (the provider's region page) and
the balancing area Electricity Maps assigns to that place; regions whose grid is not in the
2022 data set (e.g. me-south-1 Bahrain, cn-north-1) are left out and score as
``out_of_table`` rather than borrowing a neighbour's grid.
"""

from __future__ import annotations

#: Power usage effectiveness per provider. The values are fixed by the design notes (issue 2);
#: the comparison figures beside them are what the cited public sources publish.
PUE: dict[str, float] = {
    "aws": 1.15,  # design notes; Cloud Carbon Footprint's methodology uses 1.135 for AWS
    "gcp": 1.09,  # design notes; Google's environmental reports give a fleet PUE of ~1.10
    "azure": 1.17,  # design notes; Cloud Carbon Footprint's methodology uses 1.185 for Azure
    "iso": 1.5,  # generic data centre; Uptime Institute's global survey average is ~1.55
}

PUE_SOURCES: dict[str, str] = {
    "aws": "1.15 (design notes; cf. Cloud Carbon Footprint methodology 1.135)",
    "gcp": "1.09 (design notes; cf. Google environmental report fleet PUE ~1.10)",
    "azure": "1.17 (design notes; cf. Cloud Carbon Footprint methodology 1.185)",
    "iso": "1.5 generic (design notes; cf. Uptime Institute global survey ~1.55)",
}

#: Annual intensities fixed by the design notes (issue 2), attributed there to Ember's yearly
#: electricity data; the year is not stated there. These exact values carry the golden tests.
#: Each is a grid's level, so it holds for every region on the same zone (``PINNED_ZONES``):
#: AWS eu-west-3, GCP europe-west9, Azure francecentral and ISO ``fr`` all draw from France's
#: grid and get the same 41.5, rather than one of them a different source's level.
PINNED_ANNUAL: dict[str, float] = {
    "eu-west-3": 41.5,
    "eu-central-1": 329.6,
    "us-east-1": 379.0,
    "pl": 590.8,
}
PINNED_SOURCE = "ember_yearly_design_notes"

AWS_ZONES: dict[str, str] = {
    "us-east-1": "US-MIDA-PJM",  # N. Virginia
    "us-east-2": "US-MIDA-PJM",  # Ohio
    "us-west-1": "US-CAL-CISO",  # N. California
    "us-west-2": "US-NW-BPAT",  # Oregon
    "us-gov-east-1": "US-MIDA-PJM",  # Ohio
    "us-gov-west-1": "US-NW-BPAT",  # Oregon
    "ca-central-1": "CA-QC",  # Montreal
    "sa-east-1": "BR-CS",  # Sao Paulo
    "eu-west-1": "IE",  # Dublin
    "eu-west-2": "GB",  # London
    "eu-west-3": "FR",  # Paris
    "eu-central-1": "DE",  # Frankfurt
    "eu-central-2": "CH",  # Zurich
    "eu-north-1": "SE-SE3",  # Stockholm
    "eu-south-1": "IT-NO",  # Milan
    "eu-south-2": "ES",  # Aragon
    "ap-northeast-1": "JP-TK",  # Tokyo
    "ap-northeast-2": "KR",  # Seoul
    "ap-northeast-3": "JP-KN",  # Osaka
    "ap-southeast-1": "SG",  # Singapore
    "ap-southeast-2": "AU-NSW",  # Sydney
    "ap-southeast-3": "ID",  # Jakarta
    "ap-southeast-4": "AU-VIC",  # Melbourne
    "ap-south-1": "IN-MH",  # Mumbai
    "ap-east-1": "HK",  # Hong Kong
    "af-south-1": "ZA",  # Cape Town
    "il-central-1": "IL",  # Tel Aviv
}

GCP_ZONES: dict[str, str] = {
    "us-central1": "US-MIDW-MISO",  # Iowa
    "us-east1": "US-CAR-SCEG",  # South Carolina
    "us-east4": "US-MIDA-PJM",  # N. Virginia
    "us-east5": "US-MIDA-PJM",  # Columbus
    "us-west1": "US-NW-BPAT",  # Oregon
    "us-west2": "US-CAL-LDWP",  # Los Angeles
    "us-west3": "US-NW-PACE",  # Salt Lake City
    "us-west4": "US-NW-NEVP",  # Las Vegas
    "us-south1": "US-TEX-ERCO",  # Dallas
    "northamerica-northeast1": "CA-QC",  # Montreal
    "northamerica-northeast2": "CA-ON",  # Toronto
    "southamerica-east1": "BR-CS",  # Sao Paulo
    "southamerica-west1": "CL-SEN",  # Santiago
    "europe-west1": "BE",  # St. Ghislain
    "europe-west2": "GB",  # London
    "europe-west3": "DE",  # Frankfurt
    "europe-west4": "NL",  # Eemshaven
    "europe-west6": "CH",  # Zurich
    "europe-west8": "IT-NO",  # Milan
    "europe-west9": "FR",  # Paris
    "europe-north1": "FI",  # Hamina
    "europe-central2": "PL",  # Warsaw
    "europe-southwest1": "ES",  # Madrid
    "asia-east1": "TW",  # Changhua County
    "asia-east2": "HK",  # Hong Kong
    "asia-northeast1": "JP-TK",  # Tokyo
    "asia-northeast2": "JP-KN",  # Osaka
    "asia-northeast3": "KR",  # Seoul
    "asia-south1": "IN-MH",  # Mumbai
    "asia-southeast1": "SG",  # Singapore
    "asia-southeast2": "ID",  # Jakarta
    "australia-southeast1": "AU-NSW",  # Sydney
    "australia-southeast2": "AU-VIC",  # Melbourne
    "me-west1": "IL",  # Tel Aviv
    "africa-south1": "ZA",  # Johannesburg
}

AZURE_ZONES: dict[str, str] = {
    "eastus": "US-MIDA-PJM",  # Virginia
    "eastus2": "US-MIDA-PJM",  # Virginia
    "centralus": "US-MIDW-MISO",  # Iowa
    "northcentralus": "US-MIDA-PJM",  # Illinois (ComEd, PJM)
    "southcentralus": "US-TEX-ERCO",  # Texas
    "westus": "US-CAL-CISO",  # California
    "westus2": "US-NW-GCPD",  # Quincy, Washington
    "westus3": "US-SW-AZPS",  # Phoenix
    "canadacentral": "CA-ON",  # Toronto
    "canadaeast": "CA-QC",  # Quebec City
    "brazilsouth": "BR-CS",  # Sao Paulo
    "northeurope": "IE",  # Dublin
    "westeurope": "NL",  # Amsterdam
    "francecentral": "FR",  # Paris
    "francesouth": "FR",  # Marseille
    "germanywestcentral": "DE",  # Frankfurt
    "uksouth": "GB",  # London
    "ukwest": "GB",  # Cardiff
    "swedencentral": "SE-SE3",  # Gavle
    "norwayeast": "NO-NO1",  # Oslo
    "switzerlandnorth": "CH",  # Zurich
    "polandcentral": "PL",  # Warsaw
    "italynorth": "IT-NO",  # Milan
    "spaincentral": "ES",  # Madrid
    "japaneast": "JP-TK",  # Tokyo
    "japanwest": "JP-KN",  # Osaka
    "koreacentral": "KR",  # Seoul
    "southeastasia": "SG",  # Singapore
    "eastasia": "HK",  # Hong Kong
    "australiaeast": "AU-NSW",  # New South Wales
    "australiasoutheast": "AU-VIC",  # Victoria
    "centralindia": "IN-MH",  # Pune
    "southafricanorth": "ZA",  # Johannesburg
    "israelcentral": "IL",  # Israel
}

#: ISO 3166-1 alpha-2 codes whose whole country is one zone of the 2022 data set. Countries
#: split into several zones (US, AU, IT, JP, SE, NO, DK, IN, BR, CA) are left out: an
#: unweighted mean of their zones would not be the country's intensity.
ISO_ZONES: dict[str, str] = {
    code.lower(): code
    for code in (
        "AT BA BE BG CH CY CZ DE EE ES FI FR GB GR HK HR HU ID IE IL KR LT LU LV NL NZ "
        "PA PE PL PT RO SG SI SK TR TW UY ZA"
    ).split()
}
ISO_ZONES["cl"] = "CL-SEN"  # Chile's national electric system

PROVIDER_ZONES: dict[str, dict[str, str]] = {
    "aws": AWS_ZONES,
    "gcp": GCP_ZONES,
    "azure": AZURE_ZONES,
    "iso": ISO_ZONES,
}


#: zone -> (pinned annual value, the region the design notes give it for)
PINNED_ZONES: dict[str, tuple[float, str]] = {
    {**AWS_ZONES, **ISO_ZONES}[name]: (value, name) for name, value in PINNED_ANNUAL.items()
}
