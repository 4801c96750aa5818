raise ValueError("this model file fails as it is imported")
